//! HTTP surface: the WebSocket endpoint `GET /streams/{id}?from=SEQ` and the admin API on the
//! same port. Handlers validate and translate; the feed, faults and connections do the work.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use crate::connection::{self, Start};
use crate::faults::Faults;
use crate::feed::{ProductionState, Stream};
use crate::state::{Shared, Status};

/// The whole HTTP surface.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/streams/{id}", get(subscribe))
        .route("/admin/status", get(status))
        .route("/admin/streams", get(streams))
        .route("/admin/connections", get(connections))
        .route("/admin/streams/{id}/drop", post(drop_stream))
        .route("/admin/streams/{id}/produce", post(produce_stream))
        .route("/admin/streams/{id}/gap", post(gap_stream))
        .route("/admin/streams/{id}/skip", post(skip_stream))
        .route("/admin/pause", post(pause))
        .route("/admin/resume", post(resume))
        .route("/admin/stop", post(stop))
        .route("/admin/faults", post(set_faults).get(get_faults))
        .with_state(shared)
}

type AppState = State<Arc<Shared>>;

fn error(status: StatusCode, reason: impl Into<String>) -> Response {
    #[derive(Serialize)]
    struct Body {
        error: String,
    }
    (
        status,
        Json(Body {
            error: reason.into(),
        }),
    )
        .into_response()
}

/// `GET /streams/{id}?from=SEQ`: 404 for an unknown stream and 400 for a bad `from`, both before
/// the upgrade; 503 while the refuse-new fault is on.
async fn subscribe(
    State(shared): AppState,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(stream) = shared.feed.stream(&id).cloned() else {
        return error(StatusCode::NOT_FOUND, format!("unknown stream {id:?}"));
    };
    let start = match parse_from(query.as_deref()) {
        Ok(start) => start,
        Err(reason) => return error(StatusCode::BAD_REQUEST, reason),
    };
    if shared.faults.current().refuse_new {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "refusing new connections (fault)",
        );
    }
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    upgrade
        // Clients send next to nothing; a small read buffer keeps memory per connection low.
        .read_buffer_size(4 * 1024)
        .write_buffer_size(64 * 1024)
        .on_upgrade(move |socket| connection::serve(socket, stream, shared, start))
}

/// Reads `from` out of the query string; other parameters are ignored.
fn parse_from(query: Option<&str>) -> Result<Start, String> {
    let mut start = Start::Live;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "from" {
            continue;
        }
        match value.parse::<u64>() {
            Ok(0) => return Err("from=0 is invalid: sequences start at 1".into()),
            Ok(seq) => start = Start::From(seq),
            Err(_) => {
                return Err(format!(
                    "from={value:?} is invalid: give the first sequence wanted, an integer >= 1"
                ))
            }
        }
    }
    Ok(start)
}

async fn status(State(shared): AppState) -> Json<Status> {
    Json(shared.status())
}

async fn streams(State(shared): AppState) -> Json<BTreeMap<String, u64>> {
    Json(shared.last_seqs())
}

async fn connections(State(shared): AppState) -> Json<BTreeMap<String, usize>> {
    Json(shared.connections())
}

async fn drop_stream(State(shared): AppState, Path(id): Path<String>) -> Response {
    match shared.feed.stream(&id) {
        Some(stream) => {
            let dropped = stream.drop_connections();
            Json(serde_json::json!({ "stream_id": id, "dropped": dropped })).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("unknown stream {id:?}")),
    }
}

/// `POST /admin/streams/{id}/produce?count=N` (default 1): produce now, for `rate = 0` runs.
async fn produce_stream(
    State(shared): AppState,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let (stream, count) = match stream_and_count(&shared, &id, query.as_deref(), 0..=MAX_COUNT) {
        Ok(found) => found,
        Err((status, reason)) => return error(status, reason),
    };
    match shared.feed.produce_now(stream, count) {
        Some(last_seq) => {
            Json(serde_json::json!({ "stream_id": id, "last_seq": last_seq })).into_response()
        }
        None => error(StatusCode::CONFLICT, "production is stopped for good"),
    }
}

/// `POST /admin/streams/{id}/gap?count=N` (default 1): lose N new events with everything
/// retained; the next reader behind gets a gap notice. Answers the lost range.
async fn gap_stream(
    State(shared): AppState,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let (stream, count) = match stream_and_count(&shared, &id, query.as_deref(), 1..=MAX_COUNT) {
        Ok(found) => found,
        Err((status, reason)) => return error(status, reason),
    };
    match shared.feed.lose_now(stream, count) {
        Some((first, last)) => {
            Json(serde_json::json!({ "stream_id": id, "lost_from": first, "lost_to": last }))
                .into_response()
        }
        None => error(StatusCode::CONFLICT, "production is stopped for good"),
    }
}

/// The most events one `produce` or `gap` call may name.
const MAX_COUNT: u64 = 1_000_000;

/// The stream `id` and the `count` (default 1, within `allowed`) an admin call names, or why it
/// is refused: 404 for an unknown stream, 400 for a bad count. Other parameters are ignored.
fn stream_and_count<'a>(
    shared: &'a Shared,
    id: &str,
    query: Option<&str>,
    allowed: RangeInclusive<u64>,
) -> Result<(&'a Arc<Stream>, u64), (StatusCode, String)> {
    let Some(stream) = shared.feed.stream(id) else {
        return Err((StatusCode::NOT_FOUND, format!("unknown stream {id:?}")));
    };
    let mut count = 1;
    for pair in query.unwrap_or("").split('&') {
        if let Some(value) = pair.strip_prefix("count=") {
            match value.parse::<u64>() {
                Ok(n) if allowed.contains(&n) => count = n,
                _ => {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        format!(
                            "count={value:?} is invalid: give an integer {}..={}",
                            allowed.start(),
                            allowed.end()
                        ),
                    ))
                }
            }
        }
    }
    Ok((stream, count))
}

/// `POST /admin/streams/{id}/skip`: the next sequence is never sent, and no gap notice says so.
async fn skip_stream(State(shared): AppState, Path(id): Path<String>) -> Response {
    let Some(stream) = shared.feed.stream(&id) else {
        return error(StatusCode::NOT_FOUND, format!("unknown stream {id:?}"));
    };
    match shared.feed.skip_now(stream) {
        Some(seq) => Json(serde_json::json!({ "stream_id": id, "skipped": seq })).into_response(),
        None => error(StatusCode::CONFLICT, "production is stopped for good"),
    }
}

fn state_response(state: ProductionState) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "state": state }))
}

async fn pause(State(shared): AppState) -> Json<serde_json::Value> {
    state_response(shared.feed.set_state(ProductionState::Paused))
}

async fn resume(State(shared): AppState) -> Json<serde_json::Value> {
    state_response(shared.feed.set_state(ProductionState::Running))
}

async fn stop(State(shared): AppState) -> Json<serde_json::Value> {
    state_response(shared.feed.set_state(ProductionState::Stopped))
}

async fn set_faults(
    State(shared): AppState,
    body: Result<Json<Faults>, JsonRejection>,
) -> Response {
    let faults = match body {
        Ok(Json(faults)) => faults,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, rejection.body_text()),
    };
    if let Err(reason) = faults.validate() {
        return error(StatusCode::BAD_REQUEST, reason);
    }
    shared.faults.set(faults, &shared.feed);
    Json(shared.faults.current()).into_response()
}

async fn get_faults(State(shared): AppState) -> Json<Faults> {
    Json(shared.faults.current())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_parsing() {
        assert_eq!(parse_from(None), Ok(Start::Live));
        assert_eq!(parse_from(Some("")), Ok(Start::Live));
        assert_eq!(parse_from(Some("from=7")), Ok(Start::From(7)));
        assert_eq!(parse_from(Some("x=1&from=9")), Ok(Start::From(9)));
        assert!(parse_from(Some("from=0")).unwrap_err().contains("from=0"));
        assert!(parse_from(Some("from=abc"))
            .unwrap_err()
            .contains("\"abc\""));
        assert!(parse_from(Some("from=-1")).unwrap_err().contains("\"-1\""));
        assert!(parse_from(Some("from=")).unwrap_err().contains("from=\"\""));
    }
}
