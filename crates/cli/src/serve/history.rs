//! The routes on a box's history: log, show, diff, checkout, undo and tags. A route that
//! reads history also takes a versioned directory's name, as the command line does.

use axum::extract::State;

use super::answers::*;
use super::params::*;
use super::problem::{Body, Path, Query};
use super::{Answer, App};
use crate::errors::{CliError, ExitCode};
use crate::mcp::server::CheckedOut;

fn encoded(e: serde_json::Error) -> CliError {
    CliError::new(ExitCode::Failure, e.to_string(), None)
}

/// A box's history: every node, oldest first (with HEAD and tags), or only HEAD's
/// ancestors, or only the leaves (both: a list of nodes).
#[utoipa::path(get, path = "/api/boxes/{box}/log", tag = "history",
    params(("box" = String, Path, description = "the box (or a versioned directory)"), LogQuery),
    responses((status = 200, description = "the history (an object with `nodes`), or a list of nodes", body = ObjectAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn log(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(q): Query<LogQuery>,
) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        if q.ancestors {
            serde_json::to_value(h.boxes.ancestors(&env, None)?)
        } else if q.leaves {
            serde_json::to_value(h.boxes.leaves(&env)?)
        } else {
            serde_json::to_value(h.boxes.history(&env)?)
        }
        .map_err(encoded)
    })
    .await
}

/// A node of a box's history and what it changed from its parent.
#[utoipa::path(get, path = "/api/boxes/{box}/nodes/{reference}", tag = "history",
    params(("box" = String, Path, description = "the box"),
           ("reference" = String, Path, description = "HEAD, HEAD~N, a tag, an id or a unique id prefix")),
    responses((status = 200, description = "the node and its changes", body = ShownAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn show(
    State(app): State<App>,
    Path((target, reference)): Path<(String, String)>,
) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        Ok(h.boxes.show(&env, &reference)?)
    })
    .await
}

/// What changed between two nodes of a box (default: from HEAD to the working tree): paths
/// added, removed and modified; with `patch`, each file's unified diff.
#[utoipa::path(get, path = "/api/boxes/{box}/diff", tag = "history",
    params(("box" = String, Path, description = "the box"), DiffQuery),
    responses((status = 200, description = "the changed paths", body = Vec<ObjectAnswer>),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn diff(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        let from = q.from.as_deref().unwrap_or("HEAD");
        if q.patch {
            serde_json::to_value(h.boxes.diff_patch(&env, from, q.to.as_deref())?)
        } else {
            serde_json::to_value(h.boxes.diff(&env, from, q.to.as_deref())?)
        }
        .map_err(encoded)
    })
    .await
}

/// Move a box to a node of its history (its processes are killed unless
/// `keep_processes`); the node now HEAD and how many processes were killed.
#[utoipa::path(post, path = "/api/boxes/{box}/checkout", tag = "history",
    request_body = CheckoutBody,
    params(("box" = String, Path, description = "the box")),
    responses((status = 200, description = "the node now HEAD", body = CheckedOutAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn checkout(
    State(app): State<App>,
    Path(target): Path<String>,
    Body(p): Body<CheckoutBody>,
) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        let done = h.boxes.checkout(&env, &p.reference, p.keep_processes)?;
        Ok(CheckedOut {
            node: done.node,
            killed: done.killed,
        })
    })
    .await
}

/// Move a box back to HEAD's parent (a checkout of HEAD~1).
#[utoipa::path(post, path = "/api/boxes/{box}/undo", tag = "history",
    params(("box" = String, Path, description = "the box")),
    responses((status = 200, description = "the node now HEAD", body = CheckedOutAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn undo(State(app): State<App>, Path(target): Path<String>) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        let done = h.boxes.checkout(&name, "HEAD~1", false)?;
        Ok(CheckedOut {
            node: done.node,
            killed: done.killed,
        })
    })
    .await
}

/// A box's tags: each name and its node.
#[utoipa::path(get, path = "/api/boxes/{box}/tags", tag = "history",
    params(("box" = String, Path, description = "the box")),
    responses((status = 200, description = "tag name to node id", body = ObjectAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn tags(State(app): State<App>, Path(target): Path<String>) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        Ok(h.boxes.tags(&env)?)
    })
    .await
}

/// Set or move tag `name` to a node (default: HEAD).
#[utoipa::path(put, path = "/api/boxes/{box}/tags/{name}", tag = "history",
    request_body = TagBody,
    params(("box" = String, Path, description = "the box"), ("name" = String, Path, description = "the tag")),
    responses((status = 200, description = "the tag and its node", body = TagAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn tag(
    State(app): State<App>,
    Path((target, name)): Path<(String, String)>,
    Body(p): Body<TagBody>,
) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        let id = h
            .boxes
            .tag(&env, &name, p.reference.as_deref().unwrap_or("HEAD"))?;
        Ok(serde_json::json!({"tag": name, "node": id}))
    })
    .await
}

/// Delete tag `name`.
#[utoipa::path(delete, path = "/api/boxes/{box}/tags/{name}", tag = "history",
    params(("box" = String, Path, description = "the box"), ("name" = String, Path, description = "the tag")),
    responses((status = 200, description = "the deleted tag and its node", body = TagAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn untag(State(app): State<App>, Path((target, name)): Path<(String, String)>) -> Answer {
    app.call(move |h| {
        let env = h.env_name(Some(&target))?;
        let id = h.boxes.untag(&env, &name)?;
        Ok(serde_json::json!({"deleted": name, "node": id}))
    })
    .await
}
