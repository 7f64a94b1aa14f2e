//! The scrubber in mgmtd: its last pass kept across restarts (so a node restarted
//! every day still scrubs once a week), and the admin routes behind
//! `nodectl scrub status|start|pause`.

use crate::admin::{App, Failure};
use axum::extract::State;
use axum::Json;
use cairn_adminapi::{ScrubPass, ScrubStatus};
use cairn_objects::ObjectStore;
use std::path::Path;
use std::sync::Arc;

const LAST_PASS_FILE: &str = "scrub.json";
/// Present while a pass is owed (started and not completed).
const OWED_FILE: &str = "scrub.owed";

/// Restores the last completed pass from `data` and keeps it up to date there.
/// Call before the store's background tasks start.
pub(crate) fn keep_last_pass(store: &Arc<ObjectStore>, data: &Path) {
    let path = data.join(LAST_PASS_FILE);
    match std::fs::read(&path) {
        Ok(b) => match serde_json::from_slice::<ScrubPass>(&b) {
            Ok(p) => store.scrubber().restore(p),
            Err(e) => {
                tracing::warn!(path = %path.display(), "last scrub pass unreadable, ignored: {e}")
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), "last scrub pass unreadable, ignored: {e}")
        }
    }
    // A pass owed from before (cut by a crash): run it now. The file goes only
    // once a pass completes.
    let owed_path = data.join(OWED_FILE);
    if owed_path.exists() {
        tracing::info!("a scrub pass was owed before the restart: scrubbing now");
        store.scrubber().owe();
    }
    let mut owed = store.scrubber().watch_owed();
    tokio::spawn(async move {
        while owed.changed().await.is_ok() {
            let now = *owed.borrow_and_update();
            let res = if now {
                cairn_sysutil::write_atomic(&owed_path, b"owed\n", None)
            } else {
                std::fs::remove_file(&owed_path)
                    .or_else(|e| match e.kind() {
                        std::io::ErrorKind::NotFound => Ok(()),
                        _ => Err(e),
                    })
                    .and_then(|()| {
                        cairn_sysutil::sync_dir(owed_path.parent().unwrap_or(Path::new(".")))
                    })
            };
            if let Err(e) = res {
                tracing::warn!(path = %owed_path.display(), "cannot record the owed scrub pass: {e}");
            }
        }
    });
    let mut finished = store.scrubber().watch_finished();
    let store = Arc::downgrade(store);
    tokio::spawn(async move {
        while finished.changed().await.is_ok() {
            let Some(store) = store.upgrade() else { return };
            let Some(last) = store.scrubber().status().last else {
                continue;
            };
            let body = serde_json::to_vec_pretty(&last).unwrap_or_default();
            if let Err(e) = crate::write_atomic(&path, &body) {
                tracing::warn!("cannot record the scrub pass: {e}");
            }
        }
    });
}

/// `GET /v1/scrub`.
pub(crate) async fn status(State(app): State<App>) -> Result<Json<ScrubStatus>, Failure> {
    Ok(Json(app.store()?.scrubber().status()))
}

/// `POST /v1/scrub/start`: a pass now, or the paused one resumed.
pub(crate) async fn start(State(app): State<App>) -> Result<Json<ScrubStatus>, Failure> {
    let store = app.store()?;
    store.scrubber().start();
    Ok(Json(store.scrubber().status()))
}

/// `POST /v1/scrub/pause`.
pub(crate) async fn pause(State(app): State<App>) -> Result<Json<ScrubStatus>, Failure> {
    let store = app.store()?;
    store.scrubber().pause();
    Ok(Json(store.scrubber().status()))
}
