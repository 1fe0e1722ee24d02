//! The bearer token of the HTTP API and of MCP over HTTP: a random secret kept in the agentbox home (`api-token`, mode
//! 0600, made on the first `serve`), required on every request and compared in constant
//! time.
//!
//! The file is opened without following a symlink and must be a regular file of this user
//! that no one else can read: a token another user could read or plant would let them
//! drive every box.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;

use fs_err::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use agentbox_core::Home;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::errors::{CliError, CliResult, ExitCode};

/// The token file's name in the agentbox home.
pub const FILE: &str = "api-token";
/// Random bytes in a token (written as hex: 64 characters).
const BYTES: usize = 32;

/// The secret a request must send as `Authorization: Bearer <secret>`.
pub struct Token {
    secret: String,
    /// Where it is kept.
    pub path: PathBuf,
}

impl Token {
    /// The home's token, made when there is none yet.
    pub fn load_or_create(home: &Home) -> CliResult<Token> {
        let path = home.root().join(FILE);
        fs_err::create_dir_all(home.root())?;
        let refused = |why: &str| {
            CliError::new(
                ExitCode::Refused,
                format!("the API token {} {why}", path.display()),
                Some(format!(
                    "remove it (`rm {}`): serve makes a new one, readable by you alone",
                    path.display()
                )),
            )
        };
        if fs_err::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refused("is a symlink"));
        }
        // Not followed if one appears now either (the open fails).
        let opened = fs_err::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Token::create(path),
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(refused("is not a regular file"));
        }
        if meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o077 != 0 {
            return Err(refused("is not private to you (owner you, mode 0600)"));
        }
        let mut secret = String::new();
        (&mut file).take(1024).read_to_string(&mut secret)?;
        let secret = secret.trim().to_owned();
        if secret.len() < 2 * BYTES {
            return Err(refused("is too short to be a token"));
        }
        Ok(Token { secret, path })
    }

    /// A new token at `path` (which must not exist), readable by this user alone.
    fn create(path: PathBuf) -> CliResult<Token> {
        let mut raw = [0u8; BYTES];
        getrandom::fill(&mut raw).map_err(|e| {
            CliError::new(
                ExitCode::Failure,
                format!("no randomness for the API token: {e}"),
                None,
            )
        })?;
        let secret: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut file = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        file.write_all(format!("{secret}\n").as_bytes())?;
        file.sync_all()?;
        Ok(Token { secret, path })
    }

    /// The secret itself, for the web view's address (printed to the server's user only).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Lowercase hex of HMAC-SHA256 over `message`, keyed with the secret's text: what
    /// `/api/hello` answers to prove the server holds the token ([`crate::serve::hello`]).
    pub fn prove(&self, message: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, self.secret.as_bytes());
        ring::hmac::sign(&key, message.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether `given` is the secret (in time that depends on its length only).
    pub fn matches(&self, given: &str) -> bool {
        given.as_bytes().ct_eq(self.secret.as_bytes()).into()
    }
}

/// The middleware in front of every route: a request without the token, or with another,
/// is answered 401 and goes no further.
pub async fn require(State(token): State<Arc<Token>>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(t) if token.matches(t.trim()) => next.run(req).await,
        _ => unauthorized(&token.path),
    }
}

/// The answer to a request without the token, or with another one: 401, and the error as
/// the API's errors are (`{"error", "hint", "code"}`).
fn unauthorized(path: &std::path::Path) -> Response {
    let body = serde_json::json!({
        "error": "missing or wrong API token",
        "hint": format!(
            "send `Authorization: Bearer <token>`; the token is in {} (readable by the user who runs `agentbox serve`)",
            path.display()
        ),
        "code": i32::from(ExitCode::Refused),
    });
    let mut r = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}
