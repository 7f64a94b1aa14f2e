//! The scrubber's settings, status and controls: what the admin API reads and
//! `nodectl scrub start|pause` pulls; the passes themselves are in `super`.

use cairn_adminapi::{ScrubPass, ScrubStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How soon a pass that had to skip fragments (a drive down meanwhile) is followed
/// by another.
const RETRY_SKIPPED: Duration = Duration::from_secs(600);

/// When and how fast the scrubber runs.
#[derive(Clone, Copy, Debug)]
pub struct ScrubConfig {
    /// Bytes per second read at most (a quarter of it while clients are active).
    pub rate: u64,
    /// Time from the end of one pass to the start of the next (`None`: passes
    /// run only when started by the operator or by damage found at start).
    pub every: Option<Duration>,
}

impl Default for ScrubConfig {
    fn default() -> Self {
        ScrubConfig {
            rate: 64 << 20,
            // Ceph's deep-scrub interval: every byte read back once a week.
            every: Some(Duration::from_secs(7 * 24 * 3600)),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Control {
    pub(super) paused: bool,
    /// Bumped by `start`: run a pass now.
    pub(super) kicks: u64,
}

/// The scrubber's shared state: status for readers, control for the operator.
#[derive(Debug)]
pub struct Scrubber {
    pub(super) cfg: ScrubConfig,
    status: Mutex<ScrubStatus>,
    pub(super) control: watch::Sender<Control>,
    pub(super) finished: watch::Sender<u64>,
    /// Whether a pass is owed (see [`ScrubStatus::owed`]), for the caller to keep.
    pub(super) owed: watch::Sender<bool>,
    started_at: Instant,
}

impl Scrubber {
    pub fn new(cfg: ScrubConfig) -> Scrubber {
        Scrubber {
            cfg,
            status: Mutex::new(ScrubStatus {
                rate_bytes_per_s: cfg.rate,
                every_s: cfg.every.map(|e| e.as_secs()),
                ..Default::default()
            }),
            control: watch::channel(Control::default()).0,
            finished: watch::channel(0).0,
            owed: watch::channel(false).0,
            started_at: Instant::now(),
        }
    }

    pub fn status(&self) -> ScrubStatus {
        self.lock().clone()
    }

    /// Resumes a paused pass, or starts one now when none is under way.
    pub fn start(&self) {
        let running = self.lock().current.is_some();
        self.control.send_modify(|c| {
            c.paused = false;
            if !running {
                c.kicks += 1;
            }
        });
    }

    /// A whole pass is needed (damage was found, or a pass owed from before a
    /// restart): one starts now, or right after the one under way, which may have
    /// gone past the damage already. Not held back by a pause made before.
    pub fn owe(&self) {
        self.set_owed(true);
        self.control.send_modify(|c| {
            c.paused = false;
            c.kicks += 1;
        });
    }

    /// Ticks when a pass becomes owed or is paid (for the caller to persist).
    pub fn watch_owed(&self) -> watch::Receiver<bool> {
        self.owed.subscribe()
    }

    pub(super) fn set_owed(&self, owed: bool) {
        self.lock().owed = owed;
        self.owed
            .send_if_modified(|o| std::mem::replace(o, owed) != owed);
    }

    /// Pauses the running pass (and the schedule) until `start`. Not kept across
    /// a restart.
    pub fn pause(&self) {
        self.control.send_modify(|c| c.paused = true);
    }

    /// The last completed pass, from before a restart: schedules the next one.
    pub fn restore(&self, last: ScrubPass) {
        self.lock().last = Some(last);
    }

    /// Ticks once per completed pass (for the caller to persist `status().last`).
    pub fn watch_finished(&self) -> watch::Receiver<u64> {
        self.finished.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScrubStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut ScrubStatus)) {
        f(&mut self.lock())
    }

    /// When the next scheduled pass is due: `every` after the last one ended, or
    /// `every` after this process started when no pass was ever recorded.
    pub(super) fn next_due(&self) -> Option<(Instant, i64)> {
        let now_ms = cairn_meta::now_ms();
        let last = self.lock().last.clone();
        let due_ms = match (last, self.cfg.every) {
            // An incomplete pass is finished soon, whatever the schedule.
            (Some(p), every) if p.skipped > 0 => p.finished_ms.unwrap_or(now_ms).saturating_add(
                RETRY_SKIPPED
                    .min(every.unwrap_or(RETRY_SKIPPED))
                    .as_millis() as i64,
            ),
            (_, None) => return None,
            (Some(p), Some(every)) if p.finished_ms.is_some() => p
                .finished_ms
                .unwrap_or(now_ms)
                .saturating_add(every.as_millis() as i64),
            (_, Some(every)) => {
                now_ms + every.as_millis() as i64 - self.started_at.elapsed().as_millis() as i64
            }
        };
        let wait = Duration::from_millis(due_ms.saturating_sub(now_ms).max(0) as u64);
        Some((Instant::now() + wait, due_ms))
    }
}
