//! The routes on a box's files: read one (a bounded part), list a directory. Paths are the
//! box's own, resolved inside it (its links followed there, never on the host).

use axum::extract::State;

use super::answers::*;
use super::params::*;
use super::problem::{Path, Query};
use super::{Answer, App};

/// Read a file of a box from `offset`, at most `limit` bytes: text as UTF-8, anything else
/// as base64; `more` says whether the file goes on.
#[utoipa::path(get, path = "/api/boxes/{box}/file", tag = "files",
    params(("box" = String, Path, description = "the box"), ReadQuery),
    responses((status = 200, description = "the part read", body = FileAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn read(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(q): Query<ReadQuery>,
) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        let limit = q
            .limit
            .unwrap_or(agentbox_boxes::lifecycle::files::MAX_READ);
        Ok(h.boxes.read_file(&name, &q.path, q.offset, limit)?)
    })
    .await
}

/// List a directory of a box: each entry's name, kind, size, mode and modification time.
#[utoipa::path(get, path = "/api/boxes/{box}/files", tag = "files",
    params(("box" = String, Path, description = "the box"), FilesQuery),
    responses((status = 200, description = "the directory's entries", body = ListingAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn list(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(q): Query<FilesQuery>,
) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        let path = q
            .path
            .unwrap_or_else(|| agentbox_boxes::records::record::WORKSPACE.to_owned());
        Ok(h.boxes.list_files(&name, &path)?)
    })
    .await
}
