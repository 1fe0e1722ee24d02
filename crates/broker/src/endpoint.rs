//! What a broker is started with ([`Spec`]: credentials and upstreams), the box's
//! placeholder key ([`Token`]), and where the box reaches the broker ([`Endpoint`]: base
//! URLs and the environment an agent is given).

use serde::{Deserialize, Serialize};

use crate::credentials::{AnthropicCredential, Credentials};
use crate::{BrokerError, Result};

/// Path prefix of the Anthropic API on the broker: `ANTHROPIC_BASE_URL` ends with it, the
/// SDKs append `/v1/messages` and the like.
pub const ANTHROPIC_PREFIX: &str = "/anthropic";
/// Path prefix of the OpenAI API on the broker: `OPENAI_BASE_URL` is it plus `/v1` (the
/// OpenAI SDKs' base URLs include the version).
pub const OPENAI_PREFIX: &str = "/openai";
/// The only paths forwarded, below either prefix: the versioned API.
pub const API_VERSION_PREFIX: &str = "/v1/";

/// The default upstreams (`broker.anthropicUpstream`, `broker.openaiUpstream`).
pub const DEFAULT_ANTHROPIC_UPSTREAM: &str = "https://api.anthropic.com";
pub const DEFAULT_OPENAI_UPSTREAM: &str = "https://api.openai.com";

/// The broker's unix socket, in the box's inbox directory (so, inside the box, at
/// `/run/agentbox/ctl/broker.sock`).
pub const SOCKET_NAME: &str = "broker.sock";

/// A box's placeholder key: 256 random bits, what the agent in the box sends instead of an
/// API key. It is a secret only from *other* boxes (it is in this box's environment); the
/// broker of this box accepts it and nothing else.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(String);

/// What every placeholder starts with: recognisable in a box's environment as not a real
/// key.
pub const TOKEN_PREFIX: &str = "agentbox-placeholder-";

impl Token {
    /// A fresh random token.
    pub fn generate() -> Result<Token> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| BrokerError::Io(std::io::Error::other(e.to_string())))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Token(format!("{TOKEN_PREFIX}{hex}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time independent of where they differ (a box
    /// must not learn another box's token byte by byte from response times).
    pub fn matches(&self, given: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        if mine.len() != given.len() {
            return false;
        }
        mine.iter()
            .zip(given)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Enough to tell two tokens apart in a log, not enough to use one.
        let tail = self.0.get(self.0.len().saturating_sub(4)..).unwrap_or("");
        write!(f, "Token(…{tail})")
    }
}

/// Where each API's requests go. Checked when made: `https`, or `http` to a loopback host
/// only (a real key never crosses a network in the clear).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstreams {
    pub anthropic: String,
    pub openai: String,
}

impl Default for Upstreams {
    fn default() -> Upstreams {
        Upstreams {
            anthropic: DEFAULT_ANTHROPIC_UPSTREAM.to_owned(),
            openai: DEFAULT_OPENAI_UPSTREAM.to_owned(),
        }
    }
}

impl Upstreams {
    /// Both URLs, checked (see [`check_upstream`]).
    pub fn new(anthropic: &str, openai: &str) -> Result<Upstreams> {
        check_upstream("broker.anthropicUpstream", anthropic)?;
        check_upstream("broker.openaiUpstream", openai)?;
        Ok(Upstreams {
            anthropic: anthropic.trim_end_matches('/').to_owned(),
            openai: openai.trim_end_matches('/').to_owned(),
        })
    }

    pub(crate) fn check(&self) -> Result<()> {
        check_upstream("broker.anthropicUpstream", &self.anthropic)?;
        check_upstream("broker.openaiUpstream", &self.openai)
    }
}

/// Why `url` cannot be the upstream named by configuration key `key`: not a URL, a scheme
/// other than `https` (`http` only to a loopback host), credentials, a query or a fragment.
pub fn check_upstream(key: &str, url: &str) -> Result<()> {
    let bad = |why: &str| BrokerError::BadUpstream {
        key: key.to_owned(),
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    let host = parsed.host_str().ok_or_else(|| bad("it has no host"))?;
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err(bad("plain http is accepted only to a loopback host")),
        _ => return Err(bad("it must be an https URL")),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("it must not hold credentials"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("it must not have a query or fragment"));
    }
    Ok(())
}

/// What a broker is started with (or given later): the real credentials and the upstreams.
/// Crosses only the supervisor's host socket, which only the box's owner can reach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub credentials: Credentials,
    pub upstreams: Upstreams,
}

/// Where a box reaches its broker, and with what.
///
/// Invariant: nothing here is a real credential — the token is the box's placeholder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The TCP port on `127.0.0.1` inside the box's network namespace.
    pub port: u16,
    /// The box's placeholder key.
    pub token: Token,
    /// The host's Anthropic credential is an OAuth token: the agent is given the
    /// placeholder as `CLAUDE_CODE_OAUTH_TOKEN` (so it sends `Authorization: Bearer` and the
    /// OAuth headers) rather than as `ANTHROPIC_API_KEY`.
    #[serde(default)]
    pub anthropic_oauth: bool,
}

impl Endpoint {
    /// The endpoint of a broker listening on `port` with `token`, for `credentials`.
    pub fn new(port: u16, token: Token, credentials: &Credentials) -> Endpoint {
        Endpoint {
            port,
            token,
            anthropic_oauth: matches!(
                credentials.anthropic,
                Some(AnthropicCredential::OauthToken(_))
            ),
        }
    }

    /// `ANTHROPIC_BASE_URL` inside the box.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://127.0.0.1:{}{ANTHROPIC_PREFIX}", self.port)
    }

    /// `OPENAI_BASE_URL` inside the box.
    pub fn openai_base_url(&self) -> String {
        format!("http://127.0.0.1:{}{OPENAI_PREFIX}/v1", self.port)
    }

    /// The environment an agent in the box gets: base URLs and the placeholder in the
    /// variables the agents read.
    pub fn env(&self) -> Vec<(String, String)> {
        let token = self.token.as_str().to_owned();
        let anthropic_key = if self.anthropic_oauth {
            crate::credentials::CLAUDE_OAUTH_TOKEN_ENV
        } else {
            crate::credentials::ANTHROPIC_API_KEY_ENV
        };
        vec![
            ("ANTHROPIC_BASE_URL".to_owned(), self.anthropic_base_url()),
            (anthropic_key.to_owned(), token.clone()),
            ("OPENAI_BASE_URL".to_owned(), self.openai_base_url()),
            (
                crate::credentials::OPENAI_API_KEY_ENV.to_owned(),
                token.clone(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_compared_whole() {
        let (a, b) = (
            Token::generate().expect("token"),
            Token::generate().expect("token"),
        );
        assert_ne!(a, b);
        assert!(a.as_str().starts_with(TOKEN_PREFIX));
        assert!(a.matches(a.as_str().as_bytes()));
        assert!(!a.matches(b.as_str().as_bytes()));
        assert!(!a.matches(&a.as_str().as_bytes()[..10]));
        assert!(!format!("{a:?}").contains(&a.as_str()[..30]));
    }

    #[test]
    fn upstreams_are_https_or_loopback_http() {
        for ok in [
            "https://api.anthropic.com",
            "https://gw.example/anthropic/",
            "http://127.0.0.1:8080",
            "http://localhost:1",
            "http://[::1]:9",
        ] {
            check_upstream("k", ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "http://api.anthropic.com",
            "ftp://x",
            "https://u:p@x",
            "https://x/?a=1",
            "not a url",
        ] {
            assert!(check_upstream("k", bad).is_err(), "{bad}");
        }
        let u = Upstreams::new("https://a/", "https://b").expect("ok");
        assert_eq!(u.anthropic, "https://a");
    }

    #[test]
    fn the_environment_names_the_placeholder_where_the_agent_reads_it() {
        let token = Token::generate().expect("token");
        let e = Endpoint::new(4711, token.clone(), &Credentials::default());
        let env: std::collections::BTreeMap<_, _> = e.env().into_iter().collect();
        assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:4711/anthropic");
        assert_eq!(env["OPENAI_BASE_URL"], "http://127.0.0.1:4711/openai/v1");
        assert_eq!(env["ANTHROPIC_API_KEY"], token.as_str());
        let oauth = Credentials {
            anthropic: Some(AnthropicCredential::OauthToken(
                crate::credentials::Secret::new("t"),
            )),
            openai: None,
        };
        let e = Endpoint::new(1, token.clone(), &oauth);
        assert!(e
            .env()
            .iter()
            .any(|(k, v)| k == "CLAUDE_CODE_OAUTH_TOKEN" && v == token.as_str()));
    }
}
