//! The ESP as systemd-boot reads it: one Type #1 entry per slot in `loader/entries/`,
//! named `cairn-<slot>[+LEFT[-DONE]].conf` (boot counting), the slot's kernel, initrd and
//! version in `cairn/<slot>/`, and `loader/loader.conf`.
//!
//! Which slot boots is decided by systemd-boot's sort order, not by a `default` that names
//! one slot. systemd-boot matches `default` against every entry, bad ones included (a bad
//! entry is only sorted last), so `default cairn-b*` would keep booting slot b after it has
//! used up its tries. Instead `default cairn-*` matches both slots and each entry's
//! `sort-key` says which comes first: [`PREFERRED_KEY`] for the slot to boot,
//! [`FALLBACK_KEY`] for the other. An entry at `+0` sorts after every other entry whatever
//! its key, which is what makes the rollback automatic.

use crate::{io_err, sync_dir, write_atomic, Slot, SlotError};
use serde::Serialize;
use std::cmp::Ordering;
use std::fmt;
use std::path::{Path, PathBuf};

/// `sort-key` of the entry that should boot.
pub const PREFERRED_KEY: &str = "cairn-0";
/// `sort-key` of the fallback entry.
pub const FALLBACK_KEY: &str = "cairn-1";
/// `default` in loader.conf: both slots, so the sort order decides.
pub const DEFAULT_PATTERN: &str = "cairn-*";
/// Boot attempts a freshly armed slot gets before systemd-boot gives up on it.
pub const TRIES: u32 = 3;

/// Boot counting state of one entry, from its file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum BootState {
    /// No counter: blessed (or never counted).
    Good,
    /// Counting: `left` tries remain, `failed` were used without reaching boot-complete.
    Trying { left: u32, failed: u32 },
    /// No tries left: systemd-boot sorts it last and boots it only if nothing else exists.
    Bad { failed: u32 },
}

impl fmt::Display for BootState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootState::Good => f.write_str("good"),
            BootState::Trying { left, failed } => {
                write!(f, "trying {left} left, {failed} failed")
            }
            BootState::Bad { .. } => f.write_str("bad"),
        }
    }
}

/// One Cairn boot entry on the ESP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub slot: Slot,
    pub file_name: String,
    pub state: BootState,
    pub sort_key: Option<String>,
    pub version: Option<String>,
    pub options: Option<String>,
    text: String,
}

/// What `nodectl node slots` shows of one slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlotInfo {
    pub slot: Slot,
    /// The entry file name, `None` when the slot has no entry (never installed, or an
    /// update of it did not finish).
    pub entry: Option<String>,
    pub state: Option<BootState>,
    /// From `cairn/<slot>/version`, else the entry's `version` line.
    pub version: Option<String>,
}

/// The ESP mounted at `root` (`/efi` on a node).
#[derive(Clone, Debug)]
pub struct Esp {
    root: PathBuf,
}

impl Esp {
    pub fn new(root: impl Into<PathBuf>) -> Esp {
        Esp { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn entries_dir(&self) -> PathBuf {
        self.root.join("loader/entries")
    }

    pub fn loader_conf(&self) -> PathBuf {
        self.root.join("loader/loader.conf")
    }

    /// Where a slot's kernel, initrd and version file live.
    pub fn slot_dir(&self, slot: Slot) -> PathBuf {
        self.root.join("cairn").join(slot.letter().to_string())
    }

    fn esp_err(&self, message: impl Into<String>) -> SlotError {
        SlotError::Esp {
            path: self.root.display().to_string(),
            message: message.into(),
        }
    }

    /// Every Cairn entry, in directory order. Files that are not ours are ignored;
    /// an entry we cannot read is an error (it may be the one that boots).
    pub fn entries(&self) -> Result<Vec<Entry>, SlotError> {
        let dir = self.entries_dir();
        let rd = std::fs::read_dir(&dir).map_err(|e| {
            self.esp_err(format!(
                "cannot read {}: {e} (is the ESP mounted there?)",
                dir.display()
            ))
        })?;
        let mut out = Vec::new();
        for de in rd {
            let de = de.map_err(io_err(&dir))?;
            let name = de.file_name().to_string_lossy().into_owned();
            let Some((slot, state)) = parse_entry_name(&name) else {
                continue;
            };
            let path = de.path();
            let bytes = std::fs::read(&path).map_err(io_err(&path))?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            out.push(Entry {
                slot,
                file_name: name,
                state,
                sort_key: field(&text, "sort-key"),
                version: field(&text, "version"),
                options: field(&text, "options"),
                text,
            });
        }
        Ok(out)
    }

    /// The entries in the order systemd-boot sorts them (first = booted by default when
    /// `default` matches every entry).
    pub fn boot_order(&self) -> Result<Vec<Entry>, SlotError> {
        let mut e = self.entries()?;
        e.sort_by(systemd_boot_order);
        Ok(e)
    }

    /// The slot systemd-boot will boot next without a menu choice or a one-shot EFI
    /// variable: the first entry in its sort order that matches loader.conf's `default`,
    /// else the first entry.
    pub fn next_boot(&self) -> Result<Option<Slot>, SlotError> {
        let order = self.boot_order()?;
        let pattern = self.default_pattern()?;
        if let Some(p) = pattern {
            let p = p.to_ascii_lowercase();
            if let Some(e) = order
                .iter()
                .find(|e| glob_match(&p, &e.file_name.to_ascii_lowercase()))
            {
                return Ok(Some(e.slot));
            }
        }
        Ok(order.first().map(|e| e.slot))
    }

    /// The `default` line of loader.conf, if any.
    pub fn default_pattern(&self) -> Result<Option<String>, SlotError> {
        let path = self.loader_conf();
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(field(&t, "default")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// The entry of `slot` systemd-boot would pick, if it has one.
    pub fn entry(&self, slot: Slot) -> Result<Option<Entry>, SlotError> {
        Ok(self.boot_order()?.into_iter().find(|e| e.slot == slot))
    }

    pub fn slot_info(&self, slot: Slot) -> Result<SlotInfo, SlotError> {
        let entry = self.entry(slot)?;
        let vfile = self.slot_dir(slot).join("version");
        let version = match std::fs::read_to_string(&vfile) {
            Ok(v) if !v.trim().is_empty() => Some(v.trim().to_string()),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&vfile)(e)),
        }
        .or_else(|| entry.as_ref().and_then(|e| e.version.clone()));
        Ok(SlotInfo {
            slot,
            entry: entry.as_ref().map(|e| e.file_name.clone()),
            state: entry.map(|e| e.state),
            version,
        })
    }

    /// Remove every boot entry of `slot` and its kernel files. Done before the slot's
    /// partition is overwritten, so that no entry ever points at a half-written root.
    pub fn remove_slot(&self, slot: Slot) -> Result<(), SlotError> {
        let dir = self.entries_dir();
        for e in self.entries()?.into_iter().filter(|e| e.slot == slot) {
            let p = dir.join(&e.file_name);
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
        sync_dir(&dir)?;
        let sd = self.slot_dir(slot);
        for f in ["vmlinuz", "initrd.img", "version"] {
            let p = sd.join(f);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p)(e)),
            }
        }
        Ok(())
    }

    /// The kernel command line for `slot`: the root and slot markers, then `extra` when
    /// given, else the booted slot's options without its own markers (so console and
    /// other settings the image chose carry over to the update).
    pub fn options_for(
        &self,
        slot: Slot,
        extra: Option<&str>,
        booted: Slot,
    ) -> Result<String, SlotError> {
        let mut opts = format!("root=PARTLABEL={} cairn.slot={}", slot.partlabel(), slot);
        let rest = match extra {
            Some(x) => x.to_string(),
            None => self
                .entry(booted)?
                .and_then(|e| e.options)
                .unwrap_or_default(),
        };
        for w in rest.split_ascii_whitespace() {
            if !w.starts_with("root=") && !w.starts_with("cairn.slot=") {
                opts.push(' ');
                opts.push_str(w);
            }
        }
        Ok(opts)
    }

    /// Arm `slot`: write `cairn-<slot>+3.conf` pointing at the kernel and initrd already
    /// installed in [`Esp::slot_dir`], make it the preferred entry and the other slot the
    /// fallback. The caller has verified the slot's root, kernel and initrd.
    pub fn arm(&self, slot: Slot, version: &str, options: &str) -> Result<String, SlotError> {
        let sd = self.slot_dir(slot);
        for f in ["vmlinuz", "initrd.img"] {
            if !sd.join(f).is_file() {
                return Err(self.esp_err(format!(
                    "cannot arm slot {slot}: {} is missing",
                    sd.join(f).display()
                )));
            }
        }
        // Any older entry of this slot (another counter state) would compete with the new one.
        let dir = self.entries_dir();
        for e in self.entries()?.into_iter().filter(|e| e.slot == slot) {
            let p = dir.join(&e.file_name);
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
        let name = format!("cairn-{slot}+{TRIES}.conf");
        let text = format!(
            "title Cairn {version} (slot {slot})\n\
             version {version}\n\
             sort-key {PREFERRED_KEY}\n\
             linux /cairn/{slot}/vmlinuz\n\
             initrd /cairn/{slot}/initrd.img\n\
             options {options}\n"
        );
        write_atomic(&dir.join(&name), text.as_bytes())?;
        // Demote the other slot only after the new entry exists: a crash in between leaves
        // two preferred entries, both bootable, never none.
        self.set_sort_key(slot.other(), FALLBACK_KEY)?;
        self.ensure_default_pattern()?;
        Ok(name)
    }

    /// Make `slot` the one that boots (its entry must exist and not be bad).
    pub fn prefer(&self, slot: Slot) -> Result<(), SlotError> {
        match self.entry(slot)? {
            None => {
                return Err(self.esp_err(format!(
                    "slot {slot} has no boot entry (never installed, or its update did not finish)"
                )))
            }
            Some(e) if matches!(e.state, BootState::Bad { .. }) => {
                return Err(self.esp_err(format!(
                    "slot {slot} is bad: its entry {} used up its boot tries",
                    e.file_name
                )))
            }
            Some(_) => {}
        }
        self.set_sort_key(slot, PREFERRED_KEY)?;
        self.set_sort_key(slot.other(), FALLBACK_KEY)?;
        self.ensure_default_pattern()
    }

    /// Point the next boot at the slot that is not running. Refuses a slot without an
    /// entry or one that is bad. Returns the slot that will boot.
    pub fn rollback(&self, booted: Slot) -> Result<Slot, SlotError> {
        let target = booted.other();
        self.prefer(target)?;
        Ok(target)
    }

    /// Drop the boot counter of `slot`'s entry (what systemd-bless-boot does when
    /// boot-complete.target is reached). Returns false when it was already good.
    pub fn mark_good(&self, slot: Slot) -> Result<bool, SlotError> {
        let Some(e) = self.entry(slot)? else {
            return Err(self.esp_err(format!("slot {slot} has no boot entry")));
        };
        if e.state == BootState::Good {
            return Ok(false);
        }
        let dir = self.entries_dir();
        let to = dir.join(format!("cairn-{slot}.conf"));
        std::fs::rename(dir.join(&e.file_name), &to).map_err(io_err(&to))?;
        sync_dir(&dir)?;
        Ok(true)
    }

    /// Rewrite the `sort-key` line of every entry of `slot` (keeping its file name, which
    /// carries the boot counter).
    fn set_sort_key(&self, slot: Slot, key: &str) -> Result<(), SlotError> {
        let dir = self.entries_dir();
        for e in self.entries()?.into_iter().filter(|e| e.slot == slot) {
            if e.sort_key.as_deref() == Some(key) {
                continue;
            }
            let text = set_field(&e.text, "sort-key", key);
            write_atomic(&dir.join(&e.file_name), text.as_bytes())?;
        }
        Ok(())
    }

    /// Make loader.conf's `default` match both slots, keeping its other settings.
    fn ensure_default_pattern(&self) -> Result<(), SlotError> {
        let path = self.loader_conf();
        let old = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io_err(&path)(e)),
        };
        if field(&old, "default").as_deref() == Some(DEFAULT_PATTERN) {
            return Ok(());
        }
        write_atomic(
            &path,
            set_field(&old, "default", DEFAULT_PATTERN).as_bytes(),
        )
    }
}

/// `cairn-<slot>[+LEFT[-DONE]].conf` -> slot and state; `None` for any other name.
fn parse_entry_name(name: &str) -> Option<(Slot, BootState)> {
    let rest = name.strip_suffix(".conf")?.strip_prefix("cairn-")?;
    let slot = Slot::parse(rest.get(..1)?)?;
    let counter = &rest[1..];
    if counter.is_empty() {
        return Some((slot, BootState::Good));
    }
    let counter = counter.strip_prefix('+')?;
    let (left, done) = match counter.split_once('-') {
        Some((l, d)) => (l, d),
        None => (counter, "0"),
    };
    let num = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (left, failed) = (num(left)?, num(done)?);
    Some((
        slot,
        if left == 0 {
            BootState::Bad { failed }
        } else {
            BootState::Trying { left, failed }
        },
    ))
}

/// The value of the first `key value` line (loader.conf and entry syntax).
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let l = l.trim();
        let (k, v) = l.split_once(|c: char| c.is_ascii_whitespace())?;
        (k == key).then(|| v.trim().to_string())
    })
}

/// `text` with the first `key` line replaced by `key value` (appended when absent), and
/// any further `key` lines dropped.
fn set_field(text: &str, key: &str, value: &str) -> String {
    let mut out = String::new();
    let mut done = false;
    for l in text.lines() {
        let k = l.split_ascii_whitespace().next().unwrap_or("");
        if k == key {
            if !done {
                out.push_str(&format!("{key} {value}\n"));
                done = true;
            }
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    if !done {
        out.push_str(&format!("{key} {value}\n"));
    }
    out
}

/// systemd-boot's entry order (`boot_entry_compare` since v251): entries without tries
/// left last; entries with a sort key before those without; sort key ascending; version
/// descending; id descending; more tries left first; fewer tries done first.
fn systemd_boot_order(a: &Entry, b: &Entry) -> Ordering {
    let bad = |e: &Entry| matches!(e.state, BootState::Bad { .. });
    bad(a)
        .cmp(&bad(b))
        .then_with(|| a.sort_key.is_none().cmp(&b.sort_key.is_none()))
        .then_with(|| match (&a.sort_key, &b.sort_key) {
            (Some(x), Some(y)) => x.cmp(y).then_with(|| {
                version_cmp(
                    b.version.as_deref().unwrap_or(""),
                    a.version.as_deref().unwrap_or(""),
                )
            }),
            _ => Ordering::Equal,
        })
        .then_with(|| {
            version_cmp(
                &b.file_name.to_ascii_lowercase(),
                &a.file_name.to_ascii_lowercase(),
            )
        })
        .then_with(|| {
            let tries = |e: &Entry| match e.state {
                BootState::Trying { left, failed } => Some((left, failed)),
                BootState::Bad { failed } => Some((0, failed)),
                BootState::Good => None,
            };
            match (tries(a), tries(b)) {
                (Some((la, da)), Some((lb, db))) => lb.cmp(&la).then(da.cmp(&db)),
                _ => Ordering::Equal,
            }
        })
}

/// Version-aware comparison close to systemd's `strverscmp_improved`: runs of digits
/// compare as numbers, everything else byte by byte.
fn version_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let o = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if o != Ordering::Equal {
                    return o;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|c| **c == b'0').count();
    &d[z..]
}

/// `*` and `?` globbing, what loader.conf `default` patterns use.
fn glob_match(pattern: &str, s: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), s.as_bytes());
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        assert_eq!(
            parse_entry_name("cairn-a.conf"),
            Some((Slot::A, BootState::Good))
        );
        assert_eq!(
            parse_entry_name("cairn-b+3.conf"),
            Some((Slot::B, BootState::Trying { left: 3, failed: 0 }))
        );
        assert_eq!(
            parse_entry_name("cairn-b+2-1.conf"),
            Some((Slot::B, BootState::Trying { left: 2, failed: 1 }))
        );
        assert_eq!(
            parse_entry_name("cairn-a+0-3.conf"),
            Some((Slot::A, BootState::Bad { failed: 3 }))
        );
        for junk in [
            "cairn-c.conf",
            "cairn-ab.conf",
            "cairn-a+.conf",
            "cairn-a++1.conf",
            "cairn-a+1-.conf",
            "cairn-a+x.conf",
            "cairn-a.conf.tmp",
            ".cairn-a.conf.tmp",
            "debian.conf",
            "cairn-.conf",
            "cairn-é.conf",
        ] {
            assert_eq!(parse_entry_name(junk), None, "{junk}");
        }
    }

    #[test]
    fn states_display() {
        assert_eq!(BootState::Good.to_string(), "good");
        assert_eq!(
            BootState::Trying { left: 2, failed: 1 }.to_string(),
            "trying 2 left, 1 failed"
        );
        assert_eq!(BootState::Bad { failed: 3 }.to_string(), "bad");
    }

    #[test]
    fn fields_are_replaced_once() {
        let t = "title x\nsort-key old\nlinux /k\nsort-key dup\n";
        let n = set_field(t, "sort-key", "cairn-0");
        assert_eq!(n, "title x\nsort-key cairn-0\nlinux /k\n");
        assert_eq!(field(&n, "sort-key").as_deref(), Some("cairn-0"));
        assert_eq!(
            set_field("timeout 3", "default", "cairn-*"),
            "timeout 3\ndefault cairn-*\n"
        );
        assert_eq!(field("#default x\n", "default"), None);
    }

    #[test]
    fn globbing() {
        assert!(glob_match("cairn-*", "cairn-a+3-0.conf"));
        assert!(glob_match("cairn-b*", "cairn-b.conf"));
        assert!(!glob_match("cairn-b*", "cairn-a.conf"));
        assert!(glob_match("cairn-?.conf", "cairn-a.conf"));
        assert!(!glob_match("cairn-?.conf", "cairn-a+1.conf"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*a*b", "xxaxxb"));
        assert!(!glob_match("*a*b", "xxaxxbc"));
    }

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(version_cmp("1.10", "1.9"), Ordering::Greater);
        assert_eq!(version_cmp("1.010", "1.10"), Ordering::Equal);
        assert_eq!(version_cmp("1.2", "1.2.1"), Ordering::Less);
        assert_eq!(version_cmp("cairn-b", "cairn-a"), Ordering::Greater);
    }
}
