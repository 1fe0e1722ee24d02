//! The credential broker: an agent's API key never enters its box.
//!
//! Each box that asks for one gets a broker of its own, run on the host by the box's
//! supervisor. The agent in the box is given
//!
//! * a base URL, `ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/anthropic` and
//!   `OPENAI_BASE_URL=http://127.0.0.1:PORT/openai/v1`, and
//! * a placeholder key, `ANTHROPIC_API_KEY` (or `CLAUDE_CODE_OAUTH_TOKEN` when the host's
//!   credential is an OAuth token) and `OPENAI_API_KEY`: a random [`Token`] of that box.
//!
//! The broker accepts a request only when the keys it carries (`x-api-key`,
//! `Authorization: Bearer`) are that box's token (another box's is refused with 401), and
//! only on the API paths (`/anthropic/v1/…`, `/openai/v1/…`; anything else is 404). It
//! replaces the placeholder with the real credential ([`Credentials`]: the calling shell's
//! `ANTHROPIC_API_KEY` / `CLAUDE_CODE_OAUTH_TOKEN` / `OPENAI_API_KEY`, else the saved file
//! files of `<home>/credentials/`, mode 0600: `claude.token` as `agentbox claude login`
//! saves it, `anthropic.key`, `openai.key`), forwards the request to the upstream ([`Upstreams`]:
//! `broker.anthropicUpstream`, default `https://api.anthropic.com`, over rustls; no
//! redirect is followed) and streams the answer back as it comes — a server-sent event
//! reaches the box when the upstream sends it, not when the answer ends.
//!
//! Where it listens (see the local provider's supervisor): a TCP socket on `127.0.0.1:PORT`
//! *inside the box's network namespace* (made there by a short-lived host helper that
//! enters it, then handed to the supervisor), so the same URL works on every network —
//! `host`, `private` and `none` — and no process in the box relays anything; and a unix
//! socket, [`SOCKET_NAME`] in the box's inbox (`/run/agentbox/ctl/broker.sock`), for
//! clients that speak HTTP over one (`curl --unix-socket`).
//!
//! Invariants:
//! * the real credential lives in the supervisor's memory and the owner's 0600 file only —
//!   never in a box's environment, files, command lines or the agent's configuration, and
//!   never in an answer or a log line ([`Secret`] hides itself in `Debug`);
//! * a broker serves one box: its token is that box's, its listeners are in that box's
//!   namespace and inbox.

pub mod credentials;
pub mod endpoint;
mod proxy;
mod server;
#[cfg(feature = "stub")]
pub mod stub;

pub use credentials::{AnthropicCredential, Credentials, Secret, CREDENTIAL_ENV};
pub use endpoint::{Endpoint, Spec, Token, Upstreams, SOCKET_NAME};
pub use server::{Broker, Serving, MAX_CONNECTIONS};

use std::path::PathBuf;

/// Errors of the broker. None of them quotes a credential.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{}: {message}", path.display())]
    Malformed { path: PathBuf, message: String },
    #[error("{} can be read by others (mode {mode:o}); it holds credentials and must be 0600", path.display())]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{key} {url:?}: {why}")]
    BadUpstream {
        key: String,
        url: String,
        why: String,
    },
    #[error("starting the broker: {0}")]
    Start(std::io::Error),
}

impl BrokerError {
    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            BrokerError::Permissions { path, .. } => {
                Some(format!("chmod 600 {}", path.display()))
            }
            BrokerError::BadUpstream { key, .. } => Some(format!(
                "set {key} to an https URL (`agentbox config set {key} https://…`), or http to a loopback host"
            )),
            _ => None,
        }
    }
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;
