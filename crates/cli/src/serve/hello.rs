//! `GET /api/hello?nonce=N`: the server proves it holds the API token before a client sends
//! it, WITHOUT the token (it is the one route of the API outside the token check, with the
//! web view's page and assets).
//!
//! Why: a box shares the host's network by default, so while the server is down a box can
//! listen on its loopback port and collect the token from a client that reconnects (the web
//! page's event stream does, forever). A client that asks for a proof first, with a fresh
//! nonce, and sends the token only when the proof checks out, gives it to no squatter.
//!
//! The proof is lowercase hex of HMAC-SHA256, keyed with the token's text (its UTF-8
//! bytes), over `agentbox-serve:PORT:NONCE`, where PORT is the TCP port the server listens
//! on (decimal) and NONCE the query's nonce as given. The port is in it so that a squatter
//! on an old port cannot relay a client's nonce to the real server on a new port and pass
//! its answer off as its own. Both `agentbox serve` and `agentbox mcp --http` answer it:
//! they share the token.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CACHE_CONTROL;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::problem::{ApiError, Query};
use crate::api_token::Token;

/// The shortest and longest nonce taken, in bytes: a proof for a short nonce a client
/// might reuse proves little, and a long one is work for nothing.
pub const NONCE_MIN: usize = 16;
pub const NONCE_MAX: usize = 256;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HelloQuery {
    /// A fresh random string of the client's (16 to 256 bytes), never used before.
    pub nonce: String,
}

/// The server's proof that it holds the token.
#[derive(Serialize, ToSchema)]
pub struct HelloAnswer {
    /// Lowercase hex of HMAC-SHA256 keyed with the token's text, over
    /// `agentbox-serve:PORT:NONCE` (PORT: the port the server listens on, in decimal).
    pub proof: String,
    /// The port the proof is for, as the server sees it.
    pub port: u16,
}

/// What the route needs: the token and the port the server listens on.
#[derive(Clone)]
pub struct Prover {
    token: Arc<Token>,
    port: u16,
}

/// The message a proof is the HMAC of.
pub fn message(port: u16, nonce: &str) -> String {
    format!("agentbox-serve:{port}:{nonce}")
}

#[utoipa::path(get, path = "/api/hello", tag = "auth",
    params(HelloQuery),
    security(()),
    responses((status = 200, description = "the proof that this server holds the token; check it before sending the token", body = HelloAnswer),
              (status = "default", description = "an error (a nonce missing, too short or too long)", body = super::answers::ErrorAnswer)))]
pub async fn hello(State(p): State<Prover>, Query(q): Query<HelloQuery>) -> Response {
    if !(NONCE_MIN..=NONCE_MAX).contains(&q.nonce.len()) {
        return ApiError::bad_request(
            axum::http::StatusCode::BAD_REQUEST,
            format!(
                "the nonce must have {NONCE_MIN} to {NONCE_MAX} bytes, not {}",
                q.nonce.len()
            ),
        )
        .into_response();
    }
    let proof = p.token.prove(&message(p.port, &q.nonce));
    let mut r = Json(HelloAnswer {
        proof,
        port: p.port,
    })
    .into_response();
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The route, for a server on `port` holding `token`; to be merged outside the token check.
pub fn routes<S: Clone + Send + Sync + 'static>(token: Arc<Token>, port: u16) -> Router<S> {
    Router::new()
        .route("/api/hello", get(hello))
        .with_state(Prover { token, port })
}
