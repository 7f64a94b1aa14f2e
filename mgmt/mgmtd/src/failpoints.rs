//! Failpoints switched at run time from a file (compiled in only with the
//! `failpoints` feature; the history check uses it). `<data>/failpoints` holds
//! `name=action` lines in the `fail` crate's syntax (`5%return`, `off`, ...); it is
//! read every 200 ms and a failpoint whose line is gone is switched off. The file
//! is not read at start-up before the first tick, and a daemon restarted by its
//! supervisor finds the file as the check left it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) fn watch(path: PathBuf) {
    tracing::warn!(file = %path.display(), "failpoints are compiled in (test build)");
    tokio::spawn(async move {
        let mut active: BTreeMap<String, String> = BTreeMap::new();
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let wanted: BTreeMap<String, String> = text
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(n, a)| (n.trim().to_string(), a.trim().to_string()))
                .collect();
            for name in active.keys() {
                if !wanted.contains_key(name) {
                    fail::remove(name);
                }
            }
            for (name, action) in &wanted {
                if active.get(name) != Some(action) {
                    if let Err(e) = fail::cfg(name.clone(), action) {
                        tracing::warn!(failpoint = %name, "bad failpoint action {action:?}: {e}");
                        continue;
                    }
                    tracing::warn!(failpoint = %name, %action, "failpoint set");
                }
            }
            active = wanted;
        }
    });
}
