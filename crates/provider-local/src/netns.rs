//! A TCP listener inside a box's network namespace, for its supervisor's credential broker.
//!
//! The supervisor is multi-threaded, and a multi-threaded process cannot enter a user
//! namespace (a rootless box's network namespace belongs to the box's): so a short-lived,
//! single-threaded host helper — this binary as `agentbox __broker-listen PID KIND PORT` —
//! enters the namespaces of the box's launcher, binds `127.0.0.1:PORT` there and hands the
//! listening socket back over its standard input (a unix socket, `SCM_RIGHTS`), then exits.
//! A socket stays in the namespace it was made in: the supervisor accepts on it from the
//! host, and no process in the box relays anything (nothing there for the box to kill or
//! impersonate).

use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentbox_sandbox::ipc;
use serde::{Deserialize, Serialize};

use agentbox_boxes::{BoxError, Result};

/// The helper's hidden command (dispatched first thing in `main`, while the process has
/// one thread).
pub const LISTEN_COMMAND: &str = "__broker-listen";

/// How long the helper may take.
const HELPER_TIMEOUT: Duration = Duration::from_secs(10);

/// The helper's one message.
#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    /// The listening socket is attached.
    Listening {
        port: u16,
    },
    Failed {
        error: String,
    },
}

/// A listener on `127.0.0.1:port` (0: any free port) inside the network namespace of host
/// process `ns_pid` (the box's launcher), made by the helper `exe`; `rootless` when that
/// namespace belongs to the box's own user namespace, which the helper enters first.
pub fn listen_in(exe: &Path, ns_pid: u32, rootless: bool, port: u16) -> Result<TcpListener> {
    let failed = |why: String| BoxError::Supervisor(format!("broker listener: {why}"));
    let (ours, theirs) = ipc::pair().map_err(|e| failed(e.to_string()))?;
    let mut child = Command::new(exe)
        .arg(LISTEN_COMMAND)
        .arg(ns_pid.to_string())
        .arg(if rootless { "user" } else { "net" })
        .arg(port.to_string())
        // The helper needs nothing of the supervisor's environment.
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("starting {}: {e}", exe.display())))?;
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    let _ = set_socket_timeout(&ours, Timeout::Recv, Some(HELPER_TIMEOUT));
    let answer = ipc::recv::<Answer>(&ours);
    if answer.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    match answer {
        Ok((Answer::Listening { port: bound }, fds)) if fds.len() == 1 => {
            let fd = fds
                .into_iter()
                .next()
                .ok_or_else(|| failed("no socket".into()))?;
            let listener = TcpListener::from(fd);
            // The helper is ours, but check what we were handed before serving on it.
            let addr = listener.local_addr().map_err(|e| failed(e.to_string()))?;
            if !addr.ip().is_loopback() || addr.port() != bound || (port != 0 && bound != port) {
                return Err(failed(format!(
                    "the helper bound {addr}, not 127.0.0.1:{port}"
                )));
            }
            Ok(listener)
        }
        Ok((Answer::Failed { error }, _)) => Err(failed(error)),
        Ok((Answer::Listening { .. }, _)) => Err(failed("the helper sent no socket".into())),
        Err(e) => Err(failed(format!("the helper did not answer: {e}"))),
    }
}

/// The helper: `agentbox __broker-listen PID (net|user) PORT` with a unix socket as
/// standard input. Must run before the process starts a second thread. Returns the exit
/// status.
pub fn listen_main(args: &[std::ffi::OsString]) -> i32 {
    let parsed = (|| {
        let pid: u32 = args.first()?.to_str()?.parse().ok()?;
        let user = match args.get(1)?.to_str()? {
            "user" => true,
            "net" => false,
            _ => return None,
        };
        let port: u16 = args.get(2)?.to_str()?.parse().ok()?;
        Some((pid, user, port))
    })();
    let stdin = std::io::stdin();
    let Some((pid, user, port)) = parsed else {
        let _ = ipc::send(
            stdin.as_fd(),
            &Answer::Failed {
                error: format!("usage: agentbox {LISTEN_COMMAND} PID net|user PORT"),
            },
            &[],
        );
        return 2;
    };
    match enter_and_bind(pid, user, port) {
        Ok(l) => {
            let bound = l.local_addr().map(|a| a.port()).unwrap_or(port);
            match ipc::send(
                stdin.as_fd(),
                &Answer::Listening { port: bound },
                &[l.as_fd()],
            ) {
                Ok(()) => 0,
                Err(_) => 1,
            }
        }
        Err(e) => {
            let _ = ipc::send(
                stdin.as_fd(),
                &Answer::Failed {
                    error: format!("in the network namespace of process {pid}: {e}"),
                },
                &[],
            );
            1
        }
    }
}

fn enter_and_bind(pid: u32, user: bool, port: u16) -> std::io::Result<TcpListener> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    let ns = |kind: &str| fs_err::File::open(format!("/proc/{pid}/ns/{kind}"));
    // Both are opened first: once in the box's user namespace, the host's /proc entries
    // of the box may no longer be ours to open.
    let net = ns("net")?;
    let userns = if user { Some(ns("user")?) } else { None };
    if let Some(u) = &userns {
        move_into_link_name_space(u.file().as_fd(), Some(LinkNameSpaceType::User))?;
    }
    move_into_link_name_space(net.file().as_fd(), Some(LinkNameSpaceType::Network))?;
    TcpListener::bind((Ipv4Addr::LOCALHOST, port))
}
