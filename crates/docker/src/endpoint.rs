//! Which Docker engine a box lives on.
//!
//! In order, the first that says: the `--docker-host` value (a URL, or the name of a host
//! configured as `docker.hosts.NAME`), `DOCKER_HOST`, the docker context named by
//! `DOCKER_CONTEXT` or by `currentContext` in the docker CLI's `config.json`, and the
//! default socket `unix:///var/run/docker.sock` — the docker CLI's own order, so a box goes
//! where `docker ps` looks.
//!
//! A context lives in the docker configuration directory (`DOCKER_CONFIG`, else
//! `~/.docker`): `contexts/meta/<sha256 of its name>/meta.json` holds
//! `{"Name": …, "Endpoints": {"docker": {"Host": URL, "SkipTLSVerify": bool}}}` and
//! `contexts/tls/<sha256>/docker/{ca,cert,key}.pem` its TLS material, if any.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::Digest;

use crate::{DockerError, Result};

/// The default engine of the docker CLI on Linux.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// Where the engine address came from (shown in `status` and in errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A URL given with `--docker-host` (or recorded with the box).
    Given,
    /// A named host of the configuration (`docker.hosts.NAME`).
    Named(String),
    /// `DOCKER_HOST`.
    Env,
    /// A docker context.
    Context(String),
    /// Nothing said: the default socket.
    Default,
}

/// The TLS material of a `tcp://` engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// An engine address, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `unix:///…`, `tcp://host:port`, `http://…` or `ssh://user@host[:port]`.
    pub host: String,
    pub origin: Origin,
    /// For `tcp://`: the client certificate and CA, when TLS is on.
    pub tls: Option<TlsFiles>,
}

impl Endpoint {
    /// The engine as the user named it: `big (ssh://me@big)`, or the URL.
    pub fn shown(&self) -> String {
        match &self.origin {
            Origin::Named(n) => format!("{n} ({})", self.host),
            Origin::Context(c) => format!("{} (docker context {c})", self.host),
            _ => self.host.clone(),
        }
    }

    /// Whether the engine runs on another machine: a box there cannot share the host's
    /// files, so its git data is shipped over the connection.
    pub fn is_remote(&self) -> bool {
        !self.host.starts_with("unix://")
    }
}

/// What the resolution looks at; the environment is a function so that tests (and a
/// caller with a box's recorded environment) need not change the process's.
pub struct Lookup<'a> {
    /// `--docker-host`: a URL or a configured name.
    pub given: Option<&'a str>,
    /// `docker.hosts`: name → URL.
    pub named: &'a BTreeMap<String, String>,
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The docker CLI's configuration directory (`DOCKER_CONFIG`, else `~/.docker`);
    /// `None` when there is no home.
    pub docker_config: Option<PathBuf>,
}

impl Lookup<'_> {
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.is_empty())
    }
}

/// The docker CLI's configuration directory for environment `env`.
pub fn docker_config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("DOCKER_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".docker")))
}

/// Resolve the engine, in the order of the module doc.
pub fn resolve(l: &Lookup<'_>) -> Result<Endpoint> {
    if let Some(given) = l.given.filter(|g| !g.is_empty()) {
        if given.contains("://") {
            return url(l, given, Origin::Given);
        }
        let Some(host) = l.named.get(given) else {
            return Err(DockerError::UnknownHost {
                name: given.to_owned(),
                known: if l.named.is_empty() {
                    "none configured".into()
                } else {
                    l.named.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            });
        };
        return url(l, host, Origin::Named(given.to_owned()));
    }
    if let Some(host) = l.var("DOCKER_HOST") {
        return url(l, &host, Origin::Env);
    }
    if let Some(ep) = context(l)? {
        return Ok(ep);
    }
    url(l, DEFAULT_HOST, Origin::Default)
}

/// Check `host`'s form and find its TLS material.
fn url(l: &Lookup<'_>, host: &str, origin: Origin) -> Result<Endpoint> {
    let bad = |why: &str| DockerError::BadHost {
        host: host.to_owned(),
        why: why.to_owned(),
    };
    let (scheme, rest) = host
        .split_once("://")
        .ok_or_else(|| bad("not a URL (scheme://address)"))?;
    if rest.is_empty() {
        return Err(bad("no address after the scheme"));
    }
    let tls = match scheme {
        "ssh" => {
            crate::ssh::SshTarget::parse(host).map_err(|why| bad(&why))?;
            None
        }
        "unix" | "http" => None,
        "tcp" | "https" => tls_files(l, scheme == "https"),
        _ => return Err(bad(&format!("unknown scheme {scheme:?}"))),
    };
    Ok(Endpoint {
        host: host.to_owned(),
        origin,
        tls,
    })
}

/// TLS for a `tcp://` engine, as the docker CLI does it: on with `DOCKER_TLS_VERIFY` (or
/// an `https://` address), the files from `DOCKER_CERT_PATH`, else the configuration
/// directory.
fn tls_files(l: &Lookup<'_>, https: bool) -> Option<TlsFiles> {
    if !https && l.var("DOCKER_TLS_VERIFY").is_none() {
        return None;
    }
    let dir = l
        .var("DOCKER_CERT_PATH")
        .map(PathBuf::from)
        .or_else(|| l.docker_config.clone())?;
    Some(TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    })
}

#[derive(Deserialize)]
struct CliConfig {
    #[serde(rename = "currentContext", default)]
    current_context: Option<String>,
}

#[derive(Deserialize)]
struct ContextMeta {
    #[serde(rename = "Endpoints", default)]
    endpoints: BTreeMap<String, ContextEndpoint>,
}

#[derive(Deserialize)]
struct ContextEndpoint {
    #[serde(rename = "Host", default)]
    host: Option<String>,
}

/// The current docker context's engine; `None` for the context `default` (which is
/// `DOCKER_HOST` or the default socket) or when no context is set.
fn context(l: &Lookup<'_>) -> Result<Option<Endpoint>> {
    let Some(dir) = &l.docker_config else {
        return Ok(None);
    };
    let name = match l.var("DOCKER_CONTEXT") {
        Some(n) => n,
        None => {
            let path = dir.join("config.json");
            let text = match fs_err::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            // The docker CLI's own file: one it cannot parse means no context for it either.
            match serde_json::from_str::<CliConfig>(&text) {
                Ok(c) => match c.current_context.filter(|c| !c.is_empty()) {
                    Some(c) => c,
                    None => return Ok(None),
                },
                Err(_) => return Ok(None),
            }
        }
    };
    if name == "default" {
        return Ok(None);
    }
    let bad = |why: String| DockerError::BadContext {
        name: name.clone(),
        why,
    };
    let digest = hex(&sha2::Sha256::digest(name.as_bytes()));
    let meta_path = dir.join("contexts/meta").join(&digest).join("meta.json");
    let text = fs_err::read_to_string(&meta_path).map_err(|e| bad(e.to_string()))?;
    let meta: ContextMeta =
        serde_json::from_str(&text).map_err(|e| bad(format!("{}: {e}", meta_path.display())))?;
    let host = meta
        .endpoints
        .get("docker")
        .and_then(|d| d.host.clone())
        .ok_or_else(|| bad(format!("{} names no docker endpoint", meta_path.display())))?;
    let mut ep = url(l, &host, Origin::Context(name.clone()))?;
    if ep.host.starts_with("tcp://") || ep.host.starts_with("https://") {
        let tls = dir.join("contexts/tls").join(&digest).join("docker");
        if tls.join("cert.pem").is_file() {
            ep.tls = Some(TlsFiles {
                ca: tls.join("ca.pem"),
                cert: tls.join("cert.pem"),
                key: tls.join("key.pem"),
            });
        }
    }
    Ok(Some(ep))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn lookup<'a>(
        given: Option<&'a str>,
        named: &'a BTreeMap<String, String>,
        env: &'a dyn Fn(&str) -> Option<String>,
        dir: Option<PathBuf>,
    ) -> Lookup<'a> {
        Lookup {
            given,
            named,
            env,
            docker_config: dir,
        }
    }

    #[test]
    fn the_flag_then_docker_host_then_the_default() {
        let named = BTreeMap::new();
        let env = env_of(&[("DOCKER_HOST", "tcp://10.0.0.2:2375")]);
        let ep = resolve(&lookup(Some("unix:///run/d.sock"), &named, &env, None)).expect("flag");
        assert_eq!(
            (ep.host.as_str(), &ep.origin),
            ("unix:///run/d.sock", &Origin::Given)
        );
        let ep = resolve(&lookup(None, &named, &env, None)).expect("env");
        assert_eq!(ep.host, "tcp://10.0.0.2:2375");
        assert_eq!(ep.origin, Origin::Env);
        assert!(ep.tls.is_none() && ep.is_remote());
        let none = env_of(&[]);
        let ep = resolve(&lookup(None, &named, &none, None)).expect("default");
        assert_eq!(
            (ep.host.as_str(), &ep.origin),
            (DEFAULT_HOST, &Origin::Default)
        );
        assert!(!ep.is_remote());
    }

    #[test]
    fn a_named_host_resolves_and_an_unknown_one_lists_the_known() {
        let named: BTreeMap<String, String> =
            [("big".to_owned(), "ssh://me@big".to_owned())].into();
        let env = env_of(&[]);
        let ep = resolve(&lookup(Some("big"), &named, &env, None)).expect("named");
        assert_eq!(ep.host, "ssh://me@big");
        assert_eq!(ep.shown(), "big (ssh://me@big)");
        let err = resolve(&lookup(Some("small"), &named, &env, None)).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "no Docker host named \"small\" (known: big)"
        );
        assert!(err.hint().is_some_and(|h| h.contains("docker.hosts.small")));
    }

    #[test]
    fn bad_addresses_are_refused_with_the_reason() {
        let named = BTreeMap::new();
        let env = env_of(&[]);
        for (host, why) in [
            ("ftp://x", "unknown scheme \"ftp\""),
            ("unix://", "no address after the scheme"),
            ("ssh://-oProxyCommand=x", "not a host name"),
        ] {
            let err = resolve(&lookup(Some(host), &named, &env, None)).expect_err(host);
            assert!(err.to_string().contains(why), "{err}");
        }
        let env = env_of(&[("DOCKER_HOST", "localhost:2375")]);
        let err = resolve(&lookup(None, &named, &env, None)).expect_err("no scheme");
        assert!(err.to_string().contains("not a URL"), "{err}");
    }

    #[test]
    fn tls_follows_docker_tls_verify_and_the_cert_path() {
        let named = BTreeMap::new();
        let env = env_of(&[
            ("DOCKER_HOST", "tcp://h:2376"),
            ("DOCKER_TLS_VERIFY", "1"),
            ("DOCKER_CERT_PATH", "/certs"),
        ]);
        let ep = resolve(&lookup(None, &named, &env, None)).expect("tls");
        let tls = ep.tls.expect("tls files");
        assert_eq!(tls.cert, Path::new("/certs/cert.pem"));
        assert_eq!(tls.ca, Path::new("/certs/ca.pem"));
        assert_eq!(tls.key, Path::new("/certs/key.pem"));
    }

    #[test]
    fn the_current_context_of_the_docker_cli_is_used() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = dir.path().to_path_buf();
        fs_err::write(cfg.join("config.json"), r#"{"currentContext":"remote"}"#).expect("cfg");
        let digest = hex(&sha2::Sha256::digest(b"remote"));
        let meta = cfg.join("contexts/meta").join(&digest);
        fs_err::create_dir_all(&meta).expect("mkdir");
        fs_err::write(
            meta.join("meta.json"),
            r#"{"Name":"remote","Metadata":{},"Endpoints":{"docker":{"Host":"ssh://me@far","SkipTLSVerify":false}}}"#,
        )
        .expect("meta");
        let named = BTreeMap::new();
        let env = env_of(&[]);
        let ep = resolve(&lookup(None, &named, &env, Some(cfg.clone()))).expect("context");
        assert_eq!(ep.host, "ssh://me@far");
        assert_eq!(ep.origin, Origin::Context("remote".into()));
        // DOCKER_HOST wins over the context, DOCKER_CONTEXT over config.json.
        let env = env_of(&[("DOCKER_CONTEXT", "default")]);
        let ep = resolve(&lookup(None, &named, &env, Some(cfg.clone()))).expect("default ctx");
        assert_eq!(ep.origin, Origin::Default);
        let env = env_of(&[("DOCKER_CONTEXT", "gone")]);
        let err = resolve(&lookup(None, &named, &env, Some(cfg))).expect_err("missing ctx");
        assert!(
            err.to_string().starts_with("docker context \"gone\""),
            "{err}"
        );
    }
}
