//! A connection to one Docker engine: made, version-checked, and the runtime every
//! operation of this crate blocks on.

use std::future::Future;
use std::time::Duration;

use bollard::Docker;

use crate::endpoint::Endpoint;
use crate::ssh::{SshMaster, SshTarget};
use crate::{DockerError, Result};

/// The oldest Engine API agentbox speaks: Docker 20.10's. Everything this crate asks of an
/// engine (exec with a TTY size, commit with changes, labels on images) is there.
pub const MIN_API: (usize, usize) = (1, 41);

/// How long one request may take before the engine counts as unreachable (the default
/// of [`Engine::set_request_timeout`]). Long answers (a build's output, an exec's streams)
/// stream and are bounded by the engine itself; uploads see [`crate::upload`].
const REQUEST_TIMEOUT_SECS: u64 = 600;

/// How long the first answer may take: an engine that does not answer `/version` in this
/// time is unreachable, and the user should hear so now rather than after ten minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A connection to a Docker engine, on the API version both sides speak.
pub struct Engine {
    pub(crate) docker: Docker,
    rt: tokio::runtime::Runtime,
    endpoint: Endpoint,
    /// The engine's own version (`28.2.2`) and API version.
    version: String,
    api: (usize, usize),
    request_timeout: Duration,
    /// For an `ssh://` engine, the ssh connection its connections share; closed after
    /// them (fields drop in order).
    _ssh: Option<SshMaster>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("endpoint", &self.endpoint)
            .field("version", &self.version)
            .finish()
    }
}

impl Engine {
    /// Connect to `endpoint` and check that it answers with an API agentbox speaks.
    pub fn connect(endpoint: Endpoint) -> Result<Engine> {
        let shown = endpoint.shown();
        let unreachable = |why: String| DockerError::Unreachable {
            engine: shown.clone(),
            why,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let version = bollard::API_DEFAULT_VERSION;
        let host = endpoint.host.as_str();
        // The constructors only build the client; the first request is what connects.
        let ssh = if host.starts_with("ssh://") {
            let target = SshTarget::parse(host).map_err(|why| DockerError::BadHost {
                host: host.to_owned(),
                why,
            })?;
            Some(SshMaster::new(target)?)
        } else {
            None
        };
        let docker = rt
            .block_on(async {
                if let Some(ssh) = &ssh {
                    let client = hyper_util::client::legacy::Client::builder(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .build(ssh.connector());
                    Docker::connect_with_custom_transport(
                        move |req: bollard::BollardRequest| {
                            let client = client.clone();
                            async move {
                                client
                                    .request(req)
                                    .await
                                    .map_err(bollard::errors::Error::from)
                            }
                        },
                        // Only the path of the URL travels; the engine ignores the host.
                        Some("http://ssh"),
                        REQUEST_TIMEOUT_SECS,
                        version,
                    )
                    .map_err(|e| reason(&e))
                } else if host.starts_with("unix://") {
                    Docker::connect_with_unix(host, REQUEST_TIMEOUT_SECS, version)
                        .map_err(|e| reason(&e))
                } else if let Some(tls) = &endpoint.tls {
                    crate::tls::connect(host, tls, REQUEST_TIMEOUT_SECS, version)
                } else {
                    Docker::connect_with_http(host, REQUEST_TIMEOUT_SECS, version)
                        .map_err(|e| reason(&e))
                }
            })
            .map_err(unreachable)?;
        let answer =
            rt.block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, docker.version()).await });
        let v = match answer {
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer in {} s",
                    CONNECT_TIMEOUT.as_secs()
                )))
            }
            Ok(Err(e)) => {
                let mut why = reason(&e);
                if let Some(ssh) = &ssh {
                    // ssh's own words (a refused login, an unknown host key) say more
                    // than the broken connection; they arrive as the process ends.
                    let said = rt.block_on(async {
                        for _ in 0..50 {
                            let said = ssh.complaint();
                            if !said.is_empty() {
                                return said;
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        String::new()
                    });
                    if !said.is_empty() {
                        why = format!("{why}; ssh said: {said}");
                    }
                }
                return Err(unreachable(why));
            }
            Ok(Ok(v)) => v,
        };
        let api_text = v.api_version.clone().unwrap_or_default();
        let api = parse_api(&api_text).ok_or_else(|| DockerError::Engine {
            engine: shown.clone(),
            doing: "say its API version".into(),
            why: format!("{api_text:?} is not a version"),
        })?;
        if api < MIN_API {
            return Err(DockerError::TooOld {
                engine: shown,
                version: api_text,
                min: format!("{}.{}", MIN_API.0, MIN_API.1),
            });
        }
        // Speak the engine's version when it is older than the client's.
        let docker = rt
            .block_on(docker.negotiate_version())
            .map_err(|e| unreachable(reason(&e)))?;
        Ok(Engine {
            docker,
            rt,
            endpoint,
            version: v.version.unwrap_or_default(),
            api,
            request_timeout: Duration::from_secs(REQUEST_TIMEOUT_SECS),
            _ssh: ssh,
        })
    }

    /// The engine's address and where it came from.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The engine's version (`28.2.2`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The engine's API version.
    pub fn api(&self) -> (usize, usize) {
        self.api
    }

    /// How long a request may take before it fails (600 s unless set). An upload is not
    /// bounded as a whole: its body must move at least this often, and the engine must
    /// answer within this time after it has all of it.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Set [`Self::request_timeout`].
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.request_timeout = timeout;
        self.docker = self.docker.clone().with_timeout(timeout);
    }

    /// Run `f` to its end on this connection's runtime.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// An engine error while `doing`, naming this engine; a 404 is left to the caller,
    /// which knows what was missing.
    pub(crate) fn fail(&self, doing: &str, e: bollard::errors::Error) -> DockerError {
        DockerError::Engine {
            engine: self.endpoint.shown(),
            doing: doing.to_owned(),
            why: reason(&e),
        }
    }
}

/// Whether `e` is the engine's "no such object" answer.
pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The engine's own message when it gave one, else the client's with every cause below
/// it: for a remote engine the cause is what says what went wrong (`client error
/// (Connect)` alone does not; the TLS alert or ssh's refusal under it does).
fn reason(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => with_causes(other),
    }
}

/// `e` and its sources, `outer: inner: innermost`, each said once (a wrapper often
/// repeats its source's text).
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// `1.41` → (1, 41).
fn parse_api(v: &str) -> Option<(usize, usize)> {
    let (major, minor) = v.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn a_reason_carries_every_cause_once() {
        let e = Layer(
            "client error (Connect)",
            Some(Box::new(Layer(
                "ssh: Permission denied",
                Some(Box::new(Layer("Permission denied", None))),
            ))),
        );
        assert_eq!(
            with_causes(&e),
            "client error (Connect): ssh: Permission denied"
        );
        assert_eq!(with_causes(&Layer("alone", None)), "alone");
    }

    #[test]
    fn api_versions_parse_and_order() {
        assert_eq!(parse_api("1.41"), Some((1, 41)));
        assert_eq!(parse_api("1.9"), Some((1, 9)));
        assert_eq!(parse_api("x"), None);
        assert!(parse_api("1.40").expect("v") < MIN_API);
        assert!(parse_api("1.52").expect("v") >= MIN_API);
    }
}
