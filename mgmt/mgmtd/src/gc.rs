//! The collector's admin routes, behind `nodectl gc`: `GET /v1/gc` (status and
//! the last round) and `POST /v1/gc/run` (a round now, in the background; with
//! `?dry_run=true` it only reports what it would delete).

use crate::admin::{App, Failure};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use cairn_objects::GcStatus;

/// `GET /v1/gc`.
pub(crate) async fn status(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<GcStatus>, Failure> {
    app.check(&headers)?;
    Ok(Json(
        app.store()?.gc_status().map_err(crate::admin::internal)?,
    ))
}

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct RunRequest {
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/gc/run`: starts a round (queued behind one already running) and
/// answers at once; the caller follows `GET /v1/gc` until `rounds` moves on.
pub(crate) async fn run(
    State(app): State<App>,
    headers: HeaderMap,
    Query(req): Query<RunRequest>,
) -> Result<Json<GcStatus>, Failure> {
    app.check(&headers)?;
    let store = app.store()?;
    let before = store.gc_status().map_err(crate::admin::internal)?;
    let bg = store.clone();
    tokio::spawn(async move {
        if let Err(e) = bg.gc_round(req.dry_run).await {
            tracing::warn!("collector round: {e}");
        }
    });
    Ok(Json(before))
}
