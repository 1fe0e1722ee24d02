//! One request from a box: where it may go, whether it carries the box's placeholder, and
//! its forwarding to the upstream with the real credential, the answer streamed back frame
//! by frame as the upstream sends it.
//!
//! Everything in a request is box-controlled. Invariants:
//! * only paths below `/anthropic/v1/` and `/openai/v1/` are forwarded, and only when they
//!   cannot climb out of it upstream (no `.`/`..` segments, no encoded slashes or dots);
//! * a request is forwarded only when every key it presents (`x-api-key`, `Authorization:
//!   Bearer`) is this broker's token, and at least one is; those headers never reach the
//!   upstream — the real credential replaces them;
//! * the real credential appears in no answer: refusals are the broker's own text, upstream
//!   errors name the URL (which holds no credential, see [`crate::endpoint::check_upstream`]).

use std::convert::Infallible;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;

use crate::credentials::AnthropicCredential;
use crate::endpoint::{Spec, Token, ANTHROPIC_PREFIX, API_VERSION_PREFIX, OPENAI_PREFIX};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A response body: the upstream's, streamed, or the broker's own.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// What every connection of one broker shares.
pub(crate) struct State {
    pub token: Token,
    pub spec: RwLock<Arc<Spec>>,
    /// Reaches the upstreams through the caller's proxy settings (`HTTPS_PROXY`, …).
    pub client: reqwest::Client,
    /// Reaches a loopback upstream directly (a proxy cannot reach the host's loopback).
    pub direct: reqwest::Client,
}

impl State {
    pub fn spec(&self) -> Arc<Spec> {
        // A writer that panicked left a whole `Arc` behind: the value is still sound.
        self.spec.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Anthropic,
    OpenAi,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "Anthropic",
            Api::OpenAi => "OpenAI",
        }
    }
}

/// The API a request path is for and the path to ask the upstream (below the API's
/// prefix: `/v1/…`); `None` for any other path.
pub(crate) fn route(path: &str) -> Option<(Api, &str)> {
    let (api, rest) = if let Some(rest) = path.strip_prefix(ANTHROPIC_PREFIX) {
        (Api::Anthropic, rest)
    } else if let Some(rest) = path.strip_prefix(OPENAI_PREFIX) {
        (Api::OpenAi, rest)
    } else {
        return None;
    };
    if !rest.starts_with(API_VERSION_PREFIX) || !stays_put(rest) {
        return None;
    }
    Some((api, rest))
}

/// Whether `path` means the same path to any server: no dot segments, no empty segments,
/// nothing percent-encoded that a server may decode into a slash or a dot.
fn stays_put(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "\\"]
        .iter()
        .any(|s| lower.contains(s))
    {
        return false;
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let last = segments.len() - 1;
    segments
        .iter()
        .enumerate()
        .all(|(i, s)| *s != "." && *s != ".." && (!s.is_empty() || i == last))
}

/// Whether `headers` present this broker's token: at least one key, and every key given
/// (`x-api-key`, `Authorization: Bearer`) is the token.
pub(crate) fn authorized(token: &Token, headers: &HeaderMap) -> bool {
    let mut presented = false;
    for v in headers.get_all("x-api-key") {
        presented = true;
        if !token.matches(v.as_bytes()) {
            return false;
        }
    }
    for v in headers.get_all(header::AUTHORIZATION) {
        presented = true;
        let b = v.as_bytes();
        let bearer = b
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case(b"bearer "))
            .map(|_| &b[7..]);
        if !bearer.is_some_and(|t| token.matches(t)) {
            return false;
        }
    }
    presented
}

/// Headers that describe one connection, not the message: never forwarded either way.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// `headers` without the hop-by-hop ones (and those `Connection` names), nor `drop`.
fn forwardable(headers: &HeaderMap, drop: &[HeaderName]) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (k, v) in headers {
        let name = k.as_str();
        if HOP_BY_HOP.contains(&name) || named.iter().any(|n| n == name) || drop.contains(k) {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// An answer of the broker itself, in the shape both APIs' clients read
/// (`{"type":"error","error":{"type":…,"message":…}}`).
pub(crate) fn refusal(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": format!("agentbox broker: {message}")},
    });
    let mut r = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Serve one request of the box.
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(forward(&state, req).await.unwrap_or_else(|refused| refused))
}

async fn forward(state: &State, req: Request<Incoming>) -> Result<Response<Body>, Response<Body>> {
    let Some((api, rest)) = route(req.uri().path()) else {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "only /anthropic/v1/… and /openai/v1/… are forwarded",
        ));
    };
    if !authorized(&state.token, req.headers()) {
        return Err(refusal(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "this box's placeholder key is required (the ANTHROPIC_API_KEY / OPENAI_API_KEY the box was given)",
        ));
    }
    let spec = state.spec();
    let missing = || {
        refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "api_error",
            &format!(
                "the host gave no {} credential to this box's broker ({}); set it in the shell that starts the box, or save it in the agentbox home's credentials/ (`agentbox claude login`)",
                api.name(),
                match api {
                    Api::Anthropic => "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN",
                    Api::OpenAi => "OPENAI_API_KEY",
                }
            ),
        )
    };
    let (base, name, value) = match api {
        Api::Anthropic => match &spec.credentials.anthropic {
            Some(AnthropicCredential::ApiKey(k)) => (
                &spec.upstreams.anthropic,
                HeaderName::from_static("x-api-key"),
                k.expose().to_owned(),
            ),
            Some(AnthropicCredential::OauthToken(t)) => (
                &spec.upstreams.anthropic,
                header::AUTHORIZATION,
                format!("Bearer {}", t.expose()),
            ),
            None => return Err(missing()),
        },
        Api::OpenAi => match &spec.credentials.openai {
            Some(k) => (
                &spec.upstreams.openai,
                header::AUTHORIZATION,
                format!("Bearer {}", k.expose()),
            ),
            None => return Err(missing()),
        },
    };
    let mut url = format!("{base}{rest}");
    if let Some(q) = req.uri().query() {
        url.push('?');
        url.push_str(q);
    }
    let Ok(mut credential) = HeaderValue::from_str(&value) else {
        return Err(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "api_error",
            &format!(
                "the host's {} credential is not a valid header value",
                api.name()
            ),
        ));
    };
    credential.set_sensitive(true);
    let (parts, body) = req.into_parts();
    let mut headers = forwardable(
        &parts.headers,
        &[
            header::HOST,
            header::AUTHORIZATION,
            HeaderName::from_static("x-api-key"),
        ],
    );
    headers.insert(name, credential);
    let client = if is_loopback_url(base) {
        &state.direct
    } else {
        &state.client
    };
    let upstream = client
        .request(parts.method, &url)
        .headers(headers)
        .body(reqwest::Body::wrap(body))
        .send()
        .await
        .map_err(|e| {
            refusal(
                StatusCode::BAD_GATEWAY,
                "api_error",
                &format!("the {} upstream failed: {}", api.name(), chain(&e)),
            )
        })?;
    let answer: Response<reqwest::Body> = upstream.into();
    let (mut parts, body) = answer.into_parts();
    parts.headers = forwardable(&parts.headers, &[]);
    // The body goes on frame by frame as the upstream sends it: hyper writes each frame
    // out when the next one is not ready yet, so server-sent events are not held back.
    Ok(Response::from_parts(
        parts,
        body.map_err(|e| Box::new(e) as BoxError).boxed(),
    ))
}

/// Whether `url` is to a loopback host (reached without a proxy).
fn is_loopback_url(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|h| {
            h.eq_ignore_ascii_case("localhost")
                || h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        })
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_api_prefixes_are_routed() {
        assert_eq!(
            route("/anthropic/v1/messages"),
            Some((Api::Anthropic, "/v1/messages"))
        );
        assert_eq!(
            route("/openai/v1/chat/completions"),
            Some((Api::OpenAi, "/v1/chat/completions"))
        );
        assert_eq!(route("/anthropic/v1/"), Some((Api::Anthropic, "/v1/")));
        for refused in [
            "/",
            "/v1/messages",
            "/anthropic",
            "/anthropic/v2/x",
            "/anthropicx/v1/messages",
            "/anthropic/v1/../admin",
            "/anthropic/v1/./messages",
            "/anthropic/v1//messages",
            "/anthropic/v1/%2e%2e/admin",
            "/anthropic/v1/a%2Fb",
            "/openai/v1/a\\b",
            "/openai/../anthropic/v1/messages",
        ] {
            assert_eq!(route(refused), None, "{refused}");
        }
    }

    #[test]
    fn every_presented_key_must_be_the_token() {
        let token = Token::generate().expect("token");
        let t = token.as_str();
        let h = |pairs: &[(&'static str, String)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(*k, HeaderValue::from_str(v).expect("value"));
            }
            m
        };
        assert!(authorized(&token, &h(&[("x-api-key", t.into())])));
        assert!(authorized(
            &token,
            &h(&[("authorization", format!("Bearer {t}"))])
        ));
        assert!(authorized(
            &token,
            &h(&[("authorization", format!("bearer {t}"))])
        ));
        assert!(!authorized(&token, &h(&[])));
        assert!(!authorized(&token, &h(&[("x-api-key", "sk-other".into())])));
        assert!(!authorized(
            &token,
            &h(&[
                ("x-api-key", t.into()),
                ("authorization", "Bearer sk-other".into())
            ])
        ));
        assert!(!authorized(&token, &h(&[("authorization", t.into())])));
    }

    #[test]
    fn connection_headers_are_not_forwarded() {
        let mut m = HeaderMap::new();
        m.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        m.insert("x-private", HeaderValue::from_static("1"));
        m.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        m.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        m.insert("x-api-key", HeaderValue::from_static("placeholder"));
        let out = forwardable(&m, &[HeaderName::from_static("x-api-key")]);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["anthropic-version"]);
    }
}
