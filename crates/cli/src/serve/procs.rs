//! The routes on a box's processes, for the web view's process list and its read-only
//! live view of a spawned process's output: the list (running, then the last that ended),
//! and a bounded part of one process's log from a byte offset, which a client polls.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::answers::{ErrorAnswer, ObjectAnswer};

use super::problem::{Path, Query};
use super::{Answer, App};

/// The most bytes of a log one request returns.
pub const MAX_LOG: usize = 256 * 1024;

/// Which part of a log to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogPart {
    /// The byte to start at (default 0).
    #[serde(default)]
    pub offset: u64,
}

/// A part of a process's log. `text` is the bytes read, decoded as UTF-8 with invalid
/// sequences replaced (a character cut at the end of a part shows as U+FFFD once);
/// `next` is the offset to ask for next (`offset` + bytes read: equal to `offset` at the
/// log's current end).
#[derive(Debug, Serialize, ToSchema)]
pub struct LogChunk {
    pub offset: u64,
    pub next: u64,
    pub text: String,
}

/// A box's processes: the running ones, then the last that ended (none when stopped).
#[utoipa::path(get, path = "/api/boxes/{box}/processes", tag = "processes",
    params(("box" = String, Path, description = "the box")),
    responses((status = 200, description = "its processes: id, pid, kind, argv, started, and exit when ended", body = Vec<ObjectAnswer>),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn list(State(app): State<App>, Path(target): Path<String>) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        Ok(h.boxes.processes(&name)?)
    })
    .await
}

/// Up to [`MAX_LOG`] bytes of spawned process `id`'s output (stdout and stderr
/// together) from `offset`.
#[utoipa::path(get, path = "/api/boxes/{box}/processes/{id}/log", tag = "processes",
    params(("box" = String, Path, description = "the box"),
           ("id" = u64, Path, description = "the spawned process's id (from the list)"), LogPart),
    responses((status = 200, description = "the part read", body = LogChunk),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn log(
    State(app): State<App>,
    Path((target, id)): Path<(String, u64)>,
    Query(q): Query<LogPart>,
) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        let bytes = h.boxes.read_log(&name, id, q.offset, MAX_LOG)?;
        Ok(LogChunk {
            offset: q.offset,
            next: q.offset.saturating_add(bytes.len() as u64),
            text: String::from_utf8_lossy(&bytes).into_owned(),
        })
    })
    .await
}
