//! The audit trail of mutating admin calls: a log line for each, and an entry in
//! the cluster's bounded audit table (the newest `AUDIT_KEEP`, replicated).
//!
//! Failures are folded. A caller refused an action, or whose call of it failed
//! (a bad body, a missing object: any answer of 400 and up), gets one table
//! entry for it per minute; further failures of the same caller and action
//! within that minute only count, and the count is kept with the entry that
//! closes the minute (`repeated`). Without this, any reader could push the
//! admins' own entries out of the table by sending 10,000 refused calls (an
//! outside attack did it in about 3 s; a second one did it with 10,400 bad
//! bodies under a tenant's operator token), and each would cost a Raft round.
//! Calls that changed something are never folded. The log is folded the same
//! way for what never reaches the table (unauthenticated calls, refused reads):
//! one line per caller and action per minute.

use crate::access::Principal;
use crate::admin::App;
use cairn_adminapi::{Action, AuditEntry};
use cairn_meta::AdminChange;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One table entry per caller and refused action per this long.
pub(crate) const FOLD: Duration = Duration::from_secs(60);

/// The failures folded so far, per caller and action, on this node; and when
/// each (caller, action) last had a log line.
#[derive(Debug, Default)]
pub(crate) struct Refusals(
    Mutex<HashMap<(String, Action), Folded>>,
    Mutex<HashMap<(String, Action), Instant>>,
);

/// Callers remembered for the log's folding before the memory is cleared (a
/// flood of distinct names must not grow it without bound).
const LOGGED_MAX: usize = 10_000;

#[derive(Debug)]
struct Folded {
    /// When the last entry for this pair went to the table.
    since: Instant,
    /// Refusals since then, the newest kept to stand for them all.
    count: u32,
    newest: Option<AuditEntry>,
}

impl Refusals {
    /// Whether this (caller, action) may have a log line now: the first each minute.
    pub(crate) fn log_now(&self, who: &str, action: Action) -> bool {
        let mut m = self.1.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= LOGGED_MAX {
            m.retain(|_, at| at.elapsed() < FOLD);
        }
        match m.get(&(who.to_string(), action)) {
            Some(at) if at.elapsed() < FOLD => false,
            _ => {
                if m.len() < LOGGED_MAX {
                    m.insert((who.to_string(), action), Instant::now());
                }
                true
            }
        }
    }

    /// What to record for this refusal now: itself (first in its minute), with
    /// the minute before it folded in when there was one; or nothing (counted).
    fn admit(&self, entry: AuditEntry) -> Vec<AuditEntry> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = (entry.who.clone(), entry.action);
        let now = Instant::now();
        match map.get_mut(&key) {
            Some(f) if f.since.elapsed() < FOLD => {
                f.count += 1;
                f.newest = Some(entry);
                Vec::new()
            }
            Some(f) => {
                let mut out: Vec<AuditEntry> = close(f).into_iter().collect();
                out.push(entry);
                f.since = now;
                out
            }
            None => {
                map.insert(
                    key,
                    Folded {
                        since: now,
                        count: 0,
                        newest: None,
                    },
                );
                vec![entry]
            }
        }
    }

    /// The entries of minutes that have ended (their callers went quiet), or of
    /// all of them when `all` (at a stop), and forgets those callers.
    fn sweep(&self, all: bool) -> Vec<AuditEntry> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        map.retain(|_, f| {
            if !all && f.since.elapsed() < FOLD {
                return true;
            }
            out.extend(close(f));
            false
        });
        out
    }
}

/// The entry standing for a minute's folded refusals, if there were any.
fn close(f: &mut Folded) -> Option<AuditEntry> {
    let mut e = f.newest.take()?;
    e.repeated = f.count - 1;
    f.count = 0;
    Some(e)
}

/// Logs the call, and records it in the audit table in the background (the
/// answer does not wait for the cluster; before the node is a member, or with
/// the cluster unavailable, the log line is the record).
pub(crate) fn record(app: &App, p: &Principal, action: Action, path: String, status: u16) {
    let entry = AuditEntry {
        at_ms: cairn_meta::now_ms(),
        who: p.who.clone(),
        role: p.role,
        action,
        // As much of the path as says what was named (see `access::cut`).
        path: path.chars().take(256).collect(),
        status,
        node: crate::cluster::id_hex(app.cluster().id()),
        repeated: 0,
        tenant: p.tenant.map(|t| {
            app.store()
                .ok()
                .and_then(|s| s.meta().tenant(t).ok().flatten())
                .map_or_else(|| format!("{t:016x}"), |r| r.name)
        }),
    };
    let entries = if status >= 400 {
        let out = app.refusals().admit(entry.clone());
        if out.is_empty() {
            tracing::debug!(target: "cairn_audit", who = %p.who, action = %action.name(), path = %entry.path, "admin call refused again (folded)");
        }
        out
    } else {
        vec![entry.clone()]
    };
    if !entries.is_empty() {
        tracing::info!(
            target: "cairn_audit",
            who = %p.who,
            role = %p.role,
            action = %action.name(),
            path = %entry.path,
            status,
            "admin call"
        );
    }
    write(app, entries);
}

/// Every quarter minute, records the folded failures of callers that went
/// quiet; at `stop`, all of them (a restart must not lose their count).
pub(crate) async fn sweep(app: App, stop: impl std::future::Future<Output = ()>) {
    let mut tick = tokio::time::interval(FOLD / 4);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => write(&app, app.refusals().sweep(false)),
            _ = &mut stop => break,
        }
    }
    let last = app.refusals().sweep(true);
    let Ok(store) = app.store() else { return };
    let record = async {
        for entry in last {
            let _ = store.change_admin(AdminChange::Audit { entry }).await;
        }
    };
    // Bounded: a stop must not wait on a cluster that has lost its quorum.
    if tokio::time::timeout(std::time::Duration::from_secs(3), record)
        .await
        .is_err()
    {
        tracing::warn!(target: "cairn_audit", "folded audit entries not all recorded at stop");
    }
}

fn write(app: &App, entries: Vec<AuditEntry>) {
    if entries.is_empty() {
        return;
    }
    let Ok(store) = app.store() else { return };
    tokio::spawn(async move {
        for entry in entries {
            if entry.repeated > 0 {
                tracing::warn!(target: "cairn_audit", who = %entry.who, action = %entry.action.name(), repeated = entry.repeated, "admin calls refused");
            }
            if let Err(e) = store.change_admin(AdminChange::Audit { entry }).await {
                tracing::warn!(target: "cairn_audit", "audit entry not recorded in the cluster: {e}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_adminapi::Role;

    fn refused(who: &str, action: Action, n: i64) -> AuditEntry {
        AuditEntry {
            at_ms: n,
            who: who.into(),
            role: Role::Reader,
            action,
            path: format!("/p/{n}"),
            status: 403,
            node: "n".into(),
            repeated: 0,
            tenant: None,
        }
    }

    #[test]
    fn refusals_fold_per_caller_and_action_per_minute() {
        let r = Refusals::default();
        let a = Action::AdminTokenCreate;
        assert_eq!(
            r.admit(refused("x", a, 1)).len(),
            1,
            "the first is recorded"
        );
        for n in 2..=100 {
            assert!(
                r.admit(refused("x", a, n)).is_empty(),
                "the rest only count"
            );
        }
        // Another caller, or another action, is its own minute.
        assert_eq!(r.admit(refused("y", a, 1)).len(), 1);
        assert_eq!(r.admit(refused("x", Action::AdminTokenRevoke, 1)).len(), 1);
        assert!(r.sweep(false).is_empty(), "the minute has not ended");
        // The minute ends: the newest of the 99 folded stands for them all.
        for f in r.0.lock().unwrap().values_mut() {
            f.since -= FOLD;
        }
        let swept = r.sweep(false);
        assert_eq!(swept.len(), 1, "{swept:?}");
        assert_eq!((swept[0].at_ms, swept[0].repeated), (100, 98));
        assert!(r.0.lock().unwrap().is_empty(), "quiet callers forgotten");
        // After the sweep the next refusal is a new minute's first.
        assert_eq!(r.admit(refused("x", a, 101)).len(), 1);
        r.admit(refused("x", a, 102));
        r.0.lock()
            .unwrap()
            .values_mut()
            .for_each(|f| f.since -= FOLD);
        // A refusal after the minute records the folded one and itself.
        let out = r.admit(refused("x", a, 103));
        assert_eq!(
            out.iter()
                .map(|e| (e.at_ms, e.repeated))
                .collect::<Vec<_>>(),
            [(102, 0), (103, 0)]
        );
    }
}
