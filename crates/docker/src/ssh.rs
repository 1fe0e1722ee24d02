//! The `ssh://` transport: each connection to the engine is `docker system dial-stdio` run
//! on the far side by the system's `ssh` (its configuration, keys and agent apply), as the
//! docker CLI does it — but all of an [`crate::Engine`]'s connections share one ssh
//! connection (ssh's `ControlMaster`), so that a new connection costs a session on an open
//! connection rather than a login. An exec needs a connection of its own (the engine
//! hijacks it), so a login per connection would be a login per command.
//!
//! The master lives as long as the engine value, and at most [`PERSIST`] idle after it: a
//! process that dies without closing it leaves no ssh process behind for long.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;

/// How long the shared ssh connection stays up without a session (seconds).
const PERSIST: u32 = 60;
/// How long ssh may take to reach the host (seconds).
const CONNECT_TIMEOUT: u32 = 15;
/// How much of ssh's last complaint is kept for an error message.
const STDERR_TAIL: usize = 2048;

/// Where an `ssh://[user@]host[:port]` engine is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl SshTarget {
    /// Parse `ssh://[user@]host[:port]` (an IPv6 host in brackets); `Err` says why not.
    pub fn parse(url: &str) -> Result<SshTarget, String> {
        let rest = url
            .strip_prefix("ssh://")
            .ok_or_else(|| "not an ssh:// address".to_owned())?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err("an ssh:// address has no path: ssh://[user@]host[:port]".into());
        }
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_owned()), h),
            None => (None, rest),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| "unclosed [ in the host".to_owned())?;
            (h, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| format!("port {p:?} is not a number"))
            })
            .transpose()?;
        // Whatever begins with `-` would be an option to ssh.
        if host.is_empty() || host.starts_with('-') {
            return Err(format!("{host:?} is not a host name"));
        }
        if user
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.starts_with('-'))
        {
            return Err(format!("{:?} is not a user name", user.unwrap_or_default()));
        }
        Ok(SshTarget {
            user,
            host: host.to_owned(),
            port,
        })
    }
}

/// The shared ssh connection of one engine: its control socket's directory, and what ssh
/// last said on its standard error. Closing it ends the connection.
pub(crate) struct SshMaster {
    target: SshTarget,
    dir: tempfile::TempDir,
    stderr: Arc<Mutex<String>>,
}

impl SshMaster {
    pub(crate) fn new(target: SshTarget) -> io::Result<SshMaster> {
        // The control socket's path must fit a socket address (108 bytes): a short
        // directory in the system's temporary directory.
        let dir = tempfile::Builder::new().prefix("agentbox-ssh-").tempdir()?;
        Ok(SshMaster {
            target,
            dir,
            stderr: Arc::new(Mutex::new(String::new())),
        })
    }

    fn control_path(&self) -> PathBuf {
        self.dir.path().join("c")
    }

    /// ssh's options and destination, up to the remote command.
    fn args(&self) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = Vec::new();
        let mut opt = |o: String| {
            a.push("-o".into());
            a.push(o.into());
        };
        opt("ControlMaster=auto".into());
        opt(format!("ControlPath={}", self.control_path().display()));
        opt(format!("ControlPersist={PERSIST}"));
        // Never a password prompt: agentbox is not the user's terminal.
        opt("BatchMode=yes".into());
        opt(format!("ConnectTimeout={CONNECT_TIMEOUT}"));
        if let Some(port) = self.target.port {
            a.push("-p".into());
            a.push(port.to_string().into());
        }
        if let Some(user) = &self.target.user {
            a.push("-l".into());
            a.push(user.into());
        }
        a.push("--".into());
        a.push(self.target.host.clone().into());
        a
    }

    /// What ssh said on its standard error last, trimmed; empty when nothing.
    pub(crate) fn complaint(&self) -> String {
        self.stderr
            .lock()
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    }

    /// The connector the HTTP client makes its connections with.
    pub(crate) fn connector(&self) -> SshConnector {
        SshConnector {
            args: Arc::new(self.args()),
            stderr: Arc::clone(&self.stderr),
        }
    }
}

impl Drop for SshMaster {
    /// Close the shared connection now rather than after [`PERSIST`] seconds.
    fn drop(&mut self) {
        if !self.control_path().exists() {
            return;
        }
        let mut args = self.args();
        args.insert(0, "exit".into());
        args.insert(0, "-O".into());
        let _ = std::process::Command::new("ssh")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Makes a connection: `ssh … HOST docker system dial-stdio`, its stdin and stdout the
/// connection's two directions.
#[derive(Clone)]
pub(crate) struct SshConnector {
    args: Arc<Vec<std::ffi::OsString>>,
    stderr: Arc<Mutex<String>>,
}

impl tower_service::Service<hyper::Uri> for SshConnector {
    type Response = SshStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<SshStream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Self::Future {
        let args = Arc::clone(&self.args);
        let said = Arc::clone(&self.stderr);
        Box::pin(async move {
            let mut child = tokio::process::Command::new("ssh")
                .args(args.iter())
                .args(["docker", "system", "dial-stdio"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| io::Error::new(e.kind(), format!("run ssh: {e}")))?;
            let (Some(stdin), Some(stdout), Some(mut stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(io::Error::other("ssh without its pipes"));
            };
            // ssh's complaints (a refused login, a host key it does not know) are kept
            // for the error that follows.
            tokio::spawn(async move {
                let mut text = Vec::new();
                let _ = stderr.read_to_end(&mut text).await;
                if !text.is_empty() {
                    let text = String::from_utf8_lossy(&text);
                    let start = text.len().saturating_sub(STDERR_TAIL);
                    let start = (start..text.len())
                        .find(|i| text.is_char_boundary(*i))
                        .unwrap_or(text.len());
                    if let Ok(mut s) = said.lock() {
                        *s = text[start..].to_owned();
                    }
                }
            });
            Ok(SshStream {
                _child: child,
                stdin: Some(TokioIo::new(stdin)),
                stdout: TokioIo::new(stdout),
            })
        })
    }
}

/// One connection: the ssh process, killed when the connection is dropped.
pub(crate) struct SshStream {
    _child: tokio::process::Child,
    /// `None` once shut down: the far side reads EOF.
    stdin: Option<TokioIo<tokio::process::ChildStdin>>,
    stdout: TokioIo<tokio::process::ChildStdout>,
}

impl SshStream {
    fn stdin(&mut self) -> io::Result<Pin<&mut TokioIo<tokio::process::ChildStdin>>> {
        self.stdin
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::ErrorKind::BrokenPipe.into())
    }
}

impl hyper::rt::Read for SshStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdout).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SshStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stdin()?.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stdin()?.poll_flush(cx)
    }

    /// Close the write half: `docker system dial-stdio` passes the EOF on to the engine
    /// (a command's stdin ends) and keeps reading its answer.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(stdin) = this.stdin.as_mut() {
            std::task::ready!(Pin::new(stdin).poll_shutdown(cx))?;
        }
        this.stdin = None;
        Poll::Ready(Ok(()))
    }
}

impl Connection for SshStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_addresses_parse_and_options_are_refused() {
        let t = SshTarget::parse("ssh://me@big:2222").expect("parse");
        assert_eq!(
            t,
            SshTarget {
                user: Some("me".into()),
                host: "big".into(),
                port: Some(2222)
            }
        );
        let t = SshTarget::parse("ssh://big/").expect("parse");
        assert_eq!((t.user, t.host.as_str(), t.port), (None, "big", None));
        let t = SshTarget::parse("ssh://root@[fd00::2]:22").expect("v6");
        assert_eq!((t.host.as_str(), t.port), ("fd00::2", Some(22)));
        for (bad, why) in [
            ("ssh://-oProxyCommand=x", "not a host name"),
            ("ssh://-l@big", "not a user name"),
            ("ssh://me@big:x", "not a number"),
            ("ssh://big/path", "no path"),
            ("ssh://", "not a host name"),
        ] {
            let err = SshTarget::parse(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn ssh_runs_with_the_shared_connection_and_no_prompt() {
        let m =
            SshMaster::new(SshTarget::parse("ssh://me@big:2222").expect("parse")).expect("master");
        let args: Vec<String> = m
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let control = format!("ControlPath={}", m.control_path().display());
        for want in ["ControlMaster=auto", control.as_str(), "BatchMode=yes"] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        // The destination comes last, after `--`.
        assert_eq!(&args[args.len() - 2..], ["--", "big"]);
        assert!(args.windows(2).any(|w| w == ["-p", "2222"]), "{args:?}");
        assert!(args.windows(2).any(|w| w == ["-l", "me"]), "{args:?}");
    }
}
