//! `agentbox serve`: a JSON HTTP API over the façade, on axum. A front end like the command
//! line and the MCP server, and as thin: a handler parses its input, calls one operation of
//! the façade (off the server's threads: the façade blocks) and answers with its typed
//! result — the JSON `--json` prints for the same operation; a failure is the command
//! line's message, hint and exit code as JSON, under the HTTP status of its class.
//!
//! * [`crate::api_token`]: the bearer token every request must carry;
//! * [`hello`]: the one API route without it, where the server proves it holds the token;
//! * [`problem`]: errors as answers, and extractors that answer malformed input with one;
//! * [`params`] and [`answers`]: the inputs and outputs, with their schemas;
//! * [`boxes`], [`history`], [`files`]: the routes, by concern;
//! * [`events`]: server-sent events of the boxes' new nodes and state changes;
//! * [`openapi`]: the OpenAPI document, generated from the types above.
//!
//! Bounds: a request body is at most [`BODY_LIMIT`] bytes (413 past it), and a request
//! gets [`App::timeout`] to be answered (504 past it; an operation already running in a
//! box is not interrupted by it); connections are capped and a request's head must arrive
//! in time ([`crate::http_serve`]). The server listens on loopback unless `--addr` says
//! otherwise, and then warns.

mod answers;
mod boxes;
mod events;
mod files;
pub(crate) mod hello;
mod history;
mod openapi;
mod params;
pub(crate) mod problem;
mod procs;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentbox_boxes::records::registry;
use agentbox_core::Home;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Serialize;

use crate::errors::{CliError, CliResult, ExitCode};
use crate::mcp::server::Host;
use problem::ApiError;

/// The most bytes a request body may have.
pub const BODY_LIMIT: usize = 1 << 20;

/// What every handler shares: the home it serves, its token, and how long a request may
/// take.
#[derive(Clone)]
pub struct App {
    home: Home,
    token: Arc<crate::api_token::Token>,
    timeout: Duration,
}

/// A handler's answer: the operation's JSON, or an error.
type Answer = Result<Json<serde_json::Value>, ApiError>;

impl App {
    /// Run `work` with a façade of its own, on a blocking thread, and answer with its
    /// result as JSON; past the timeout, answer 504 (the work finishes unobserved).
    async fn call<T: Serialize>(
        &self,
        work: impl FnOnce(&Host) -> CliResult<T> + Send + 'static,
    ) -> Answer {
        let home = self.home.clone();
        let job = tokio::task::spawn_blocking(move || {
            let host = Host {
                boxes: crate::compose::boxes(&home),
                cwd: registry::current_dir()?,
                home,
            };
            work(&host).and_then(|v| {
                serde_json::to_value(&v).map_err(|e| {
                    CliError::new(
                        ExitCode::Failure,
                        format!("cannot encode the result: {e}"),
                        None,
                    )
                })
            })
        });
        match tokio::time::timeout(self.timeout, job).await {
            Ok(Ok(Ok(v))) => Ok(Json(v)),
            Ok(Ok(Err(e))) => Err(e.into()),
            Ok(Err(e)) => Err(ApiError::failure(format!("the operation failed: {e}"))),
            Err(_) => Err(ApiError {
                status: axum::http::StatusCode::GATEWAY_TIMEOUT,
                error: CliError::new(
                    ExitCode::Failure,
                    format!(
                        "the request took longer than {} s; the operation goes on in the background",
                        self.timeout.as_secs()
                    ),
                    Some(
                        "see its effect with the box's status and log; restart `agentbox serve` with a longer --timeout for long commands"
                            .into(),
                    ),
                ),
            }),
        }
    }
}

/// The routes, behind the token check (but the proof and the web view), for a server on
/// `port`.
fn router(app: App, port: u16) -> Router {
    let doc = Arc::new(openapi::document());
    Router::new()
        .route(
            "/api/openapi.json",
            get(move || async move { Json((*doc).clone()) }),
        )
        .route("/api/boxes", get(boxes::list).post(boxes::create))
        .route(
            "/api/boxes/{box}",
            get(boxes::status).delete(boxes::destroy),
        )
        .route("/api/boxes/{box}/exec", post(boxes::exec))
        .route("/api/boxes/{box}/fork", post(boxes::fork))
        .route("/api/boxes/{box}/tournament", post(boxes::tournament))
        .route(
            "/api/boxes/{box}/checkpoints",
            post(boxes::checkpoint_create),
        )
        .route("/api/checkpoints", get(boxes::checkpoint_list))
        .route("/api/boxes/{box}/log", get(history::log))
        .route("/api/boxes/{box}/nodes/{reference}", get(history::show))
        .route("/api/boxes/{box}/diff", get(history::diff))
        .route("/api/boxes/{box}/checkout", post(history::checkout))
        .route("/api/boxes/{box}/undo", post(history::undo))
        .route("/api/boxes/{box}/tags", get(history::tags))
        .route(
            "/api/boxes/{box}/tags/{name}",
            put(history::tag).delete(history::untag),
        )
        .route("/api/boxes/{box}/file", get(files::read))
        .route("/api/boxes/{box}/files", get(files::list))
        .route("/api/events", get(events::events))
        .route("/api/boxes/{box}/processes", get(procs::list))
        .route("/api/boxes/{box}/processes/{id}/log", get(procs::log))
        .fallback(problem::no_route)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            app.token.clone(),
            crate::api_token::require,
        ))
        // A backstop for what the handlers' own timeout does not cover (a body sent
        // slowly); the event stream's body is not bounded by it.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            app.timeout + Duration::from_secs(5),
        ))
        // The page and its assets carry no secret, and the proof is what a client asks
        // for before it sends the token: outside the token check.
        .merge(web::routes())
        .merge(hello::routes(app.token.clone(), port))
        .with_state(app)
}

/// Serve the API for home `home` on `addr` until killed.
pub fn serve(home: Home, addr: SocketAddr, timeout: Duration) -> CliResult {
    let token = crate::api_token::Token::load_or_create(&home)?;
    let failed =
        |e: &dyn std::fmt::Display| CliError::new(ExitCode::Failure, format!("serve: {e}"), None);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(&e))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            CliError::new(
                ExitCode::Failure,
                format!("cannot listen on {addr}: {e}"),
                Some("pick another port with --addr 127.0.0.1:PORT".into()),
            )
        })?;
        let bound = listener.local_addr().map_err(|e| failed(&e))?;
        if !bound.ip().is_loopback() {
            eprintln!(
                "agentbox: warning: the API listens on {bound}, reachable from other machines; anyone holding the token drives every box"
            );
        }
        eprintln!("agentbox: serving the API on http://{bound}/api (OpenAPI document: http://{bound}/api/openapi.json)");
        eprintln!(
            "  token: in {}; send it as `Authorization: Bearer $(cat {})`",
            token.path.display(),
            token.path.display()
        );
        eprintln!("  web view: {}", web::url(bound, token.secret()));
        let app = App {
            home,
            token: Arc::new(token),
            timeout,
        };
        crate::http_serve::run(listener, router(app, bound.port())).await;
        Ok(())
    })
}
