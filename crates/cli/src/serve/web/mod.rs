//! The web view: one page and its script and style sheet, embedded in the binary (no
//! CDN, no build step; it works offline), served at `/` and `/assets/...` WITHOUT the
//! token: they carry no secret. The page reads the token from its URL's fragment
//! (`/#token=...`, which a browser never sends to a server) once, removes it from the
//! address bar and keeps it in memory only (never in the tab's storage, which a page a
//! squatter served on this port after a reload could read; a reload forgets it), and
//! sends it as `Authorization: Bearer` on API calls, only after the server proved it
//! holds it ([`super::hello`]) — before the first call and after every break. The event stream is read with `fetch` and a
//! streamed body rather than `EventSource`, so it too carries the token in that header:
//! no URL the server sees ever holds the token, and no route accepts it anywhere else.
//!
//! Every answer here has a Content-Security-Policy that allows only this origin's own
//! script and style (no inline script, no `eval`, no frames), so that text from a box the
//! page would wrongly treat as HTML could still run nothing; the page inserts box text
//! with `textContent` only.

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::App;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const TREE: &str = include_str!("assets/tree.js");
const STYLE: &str = include_str!("assets/app.css");

/// Only this origin's script, style and API; nothing inline, no frames, no plugins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// An embedded asset with its type and the headers every answer of the web view has.
fn asset(body: &'static str, ctype: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(ctype)),
            (CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
            (
                HeaderName::from_static("referrer-policy"),
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        body,
    )
}

/// The page and its assets, outside the token check.
pub fn routes() -> Router<App> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/tree.js",
            get(|| async { asset(TREE, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

/// The address to open the web view at: the page, with the token in the fragment.
pub fn url(bound: std::net::SocketAddr, secret: &str) -> String {
    format!("http://{bound}/#token={secret}")
}
