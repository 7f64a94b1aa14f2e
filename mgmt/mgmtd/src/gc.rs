//! The collector's admin routes, behind `nodectl gc`: `GET /v1/gc` (status and
//! the last round) and `POST /v1/gc/run` (a round now, in the background; with
//! `?dry_run=true` it only reports what it would delete).

use crate::admin::{App, Failure};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use cairn_adminapi::{GcRunQuery, GcStatus};

/// `GET /v1/gc`.
pub(crate) async fn status(State(app): State<App>) -> Result<Json<GcStatus>, Failure> {
    Ok(Json(app.store()?.gc_status()?))
}

/// `POST /v1/gc/run`: starts a round (queued behind one already running) and
/// answers at once; the caller follows `GET /v1/gc` until `rounds` moves on.
pub(crate) async fn run(
    State(app): State<App>,
    query: Result<Query<GcRunQuery>, QueryRejection>,
) -> Result<Json<GcStatus>, Failure> {
    let Query(req) = query?;
    let store = app.store()?;
    let before = store.gc_status()?;
    let bg = store.clone();
    tokio::spawn(async move {
        if let Err(e) = bg.gc_round(req.dry_run).await {
            tracing::warn!("collector round: {e}");
        }
    });
    Ok(Json(before))
}
