//! The routes on boxes as a whole: list, create, status, destroy, exec, fork, tournament
//! and checkpoints. Each calls one operation of the façade, as the MCP tool of the same
//! name does.

use agentbox_boxes::records::registry;
use axum::extract::State;
use axum::http::StatusCode;

use super::answers::*;
use super::params::*;
use super::problem::{ApiError, Body, Path, Query};
use super::{Answer, App};
use crate::errors::CliError;
use crate::mcp::ops::{NewBox, Race};
use crate::mcp::reply::{self, Executed};
use crate::mcp::server::Notes;

/// The boxes of the server's current project (`all`: of every project; every environment
/// when the server runs in no project), with state, HEAD, branches and where each runs.
#[utoipa::path(get, path = "/api/boxes", tag = "boxes", params(ListQuery),
    responses((status = 200, description = "the environments", body = Vec<ListedAnswer>),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn list(State(app): State<App>, Query(q): Query<ListQuery>) -> Answer {
    app.call(move |h| {
        let here = if q.all {
            None
        } else {
            registry::current_project(&h.home, &h.cwd)?
        };
        Ok(h.boxes.list(here.as_deref())?)
    })
    .await
}

/// Create a box of a project directory, on its own git branch, with the project's
/// uncommitted work carried over; from a checkpoint when one is named (or the project has
/// a default). The box is left running.
#[utoipa::path(post, path = "/api/boxes", tag = "boxes", request_body = CreateBody,
    responses((status = 201, description = "the new box", body = MadeAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn create(
    State(app): State<App>,
    Body(p): Body<CreateBody>,
) -> Result<(StatusCode, axum::Json<serde_json::Value>), ApiError> {
    let made = app
        .call(move |h| {
            h.create_box(NewBox {
                name: p.name,
                project: p.project,
                checkpoint: p.checkpoint,
                no_checkpoint: p.no_checkpoint,
                accept_stale: p.accept_stale,
                provider: p.provider,
            })
        })
        .await?;
    Ok((StatusCode::CREATED, made))
}

/// A box's status: its record, state, branches (ahead/behind the host's, uncommitted
/// paths), processes, limits, network and auto-capture's health.
#[utoipa::path(get, path = "/api/boxes/{box}", tag = "boxes",
    params(("box" = String, Path, description = "the box: name, id, id prefix, display name or number")),
    responses((status = 200, description = "its status", body = ObjectAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn status(State(app): State<App>, Path(target): Path<String>) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        Ok(serde_json::json!({ "box": h.boxes.status(&name)? }))
    })
    .await
}

/// Destroy a box: stop it and remove its environment and directory (its branches stay in
/// the host repositories unless `delete_branch`).
#[utoipa::path(delete, path = "/api/boxes/{box}", tag = "boxes",
    params(("box" = String, Path, description = "the box"), DestroyQuery),
    responses((status = 200, description = "what was destroyed", body = DestroyedAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn destroy(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(q): Query<DestroyQuery>,
) -> Answer {
    app.call(move |h| {
        let rec = h.box_record(Some(&target))?;
        let notes = Notes::default();
        let deleted = h.boxes.destroy(&rec.name, q.delete_branch, &notes)?;
        Ok(serde_json::json!({
            "destroyed": rec.name,
            "id": rec.id,
            "deleted_branches": deleted,
            "notes": notes.take(),
        }))
    })
    .await
}

/// Run a command in a box (started if stopped) and wait for it: its exit status, its output
/// (stdout and stderr together; long output is cut in the middle, with a note), and the
/// node its changes made.
#[utoipa::path(post, path = "/api/boxes/{box}/exec", tag = "boxes", request_body = ExecBody,
    params(("box" = String, Path, description = "the box")),
    responses((status = 200, description = "how the command ended", body = ExecAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn exec(
    State(app): State<App>,
    Path(target): Path<String>,
    Body(p): Body<ExecBody>,
) -> Answer {
    app.call(move |h| {
        if p.argv.is_empty() {
            return Err(CliError::usage(
                "exec needs a command",
                "give argv, e.g. [\"ls\", \"-la\"] or [\"sh\", \"-c\", \"make test\"]",
            ));
        }
        let name = h.box_name(Some(&target))?;
        let max = p
            .max_output
            .unwrap_or(reply::DEFAULT_OUTPUT)
            .clamp(1, reply::MAX_OUTPUT);
        let ran = h.boxes.run_collected(
            &name,
            p.argv,
            p.workdir.as_deref(),
            p.capture.unwrap_or(true),
        )?;
        Ok(Executed::new(ran, max))
    })
    .await
}

/// A new box from a node of a box's history (default: HEAD), on its own branch.
#[utoipa::path(post, path = "/api/boxes/{box}/fork", tag = "boxes", request_body = ForkBody,
    params(("box" = String, Path, description = "the box to fork")),
    responses((status = 201, description = "the new box", body = MadeAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn fork(
    State(app): State<App>,
    Path(target): Path<String>,
    Body(p): Body<ForkBody>,
) -> Result<(StatusCode, axum::Json<serde_json::Value>), ApiError> {
    let made = app
        .call(move |h| {
            let source = h.box_name(Some(&target))?;
            h.fork_box(source, p.name, p.at)
        })
        .await?;
    Ok((StatusCode::CREATED, made))
}

/// Race candidate commands, each in its own fork of a box, judged by a test command; each
/// candidate's exit, test exit, node, branch and verdict, and the winner.
#[utoipa::path(post, path = "/api/boxes/{box}/tournament", tag = "boxes",
    request_body = TournamentBody,
    params(("box" = String, Path, description = "the box whose forks race")),
    responses((status = 200, description = "the candidates and the winner", body = ObjectAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn tournament(
    State(app): State<App>,
    Path(target): Path<String>,
    Body(p): Body<TournamentBody>,
) -> Answer {
    app.call(move |h| {
        let source = h.box_name(Some(&target))?;
        h.race(
            source,
            Race {
                test: p.test,
                candidates: p
                    .candidates
                    .into_iter()
                    .map(|c| (c.name, c.command))
                    .collect(),
                at: p.at,
                keep: p.keep,
                keep_losers: p.keep_losers,
                parallel: p.parallel,
                timeout: p.timeout,
                first: p.first,
            },
        )
    })
    .await
}

/// Capture a box as a checkpoint of its project: new boxes can start from it warm.
#[utoipa::path(post, path = "/api/boxes/{box}/checkpoints", tag = "checkpoints",
    request_body = CheckpointBody,
    params(("box" = String, Path, description = "the box to capture")),
    responses((status = 200, description = "the checkpoint", body = ObjectAnswer),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn checkpoint_create(
    State(app): State<App>,
    Path(target): Path<String>,
    Body(p): Body<CheckpointBody>,
) -> Answer {
    app.call(move |h| {
        let name = h.box_name(Some(&target))?;
        h.checkpoint(name, p.name, (p.set_default, p.merged, p.replace))
    })
    .await
}

/// The checkpoints of a project (default: the server's current one), or of every project.
#[utoipa::path(get, path = "/api/checkpoints", tag = "checkpoints", params(CheckpointsQuery),
    responses((status = 200, description = "the checkpoints", body = Vec<ObjectAnswer>),
              (status = "default", description = "an error", body = ErrorAnswer)))]
pub async fn checkpoint_list(State(app): State<App>, Query(q): Query<CheckpointsQuery>) -> Answer {
    app.call(move |h| h.checkpoints(q.project, q.all)).await
}
