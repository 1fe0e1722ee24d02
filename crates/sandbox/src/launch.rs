//! Starting a box: the supervisor side of [`crate::init`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::init::CTL_FD;
use crate::ipc;
use crate::proto::{BoxSpec, FromInit};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("starting the box's first process failed: {0}")]
    Spawn(std::io::Error),
    #[error("setting up the box failed: {0}")]
    Setup(String),
    #[error(transparent)]
    Ipc(#[from] ipc::IpcError),
}

/// A running box: its launcher process and the control socket to its PID 1.
#[derive(Debug)]
pub struct Running {
    pub launcher: Child,
    pub ctl: OwnedFd,
    /// PID 1 of the box, as the host sees it.
    pub pid1_host: i32,
}

/// Start a box from `spec` by re-executing `exe` (the agentbox binary) as the hidden
/// `__box-init` command. Returns once PID 1 has built the box and takes requests.
///
/// The launcher is killed when the *thread* calling this exits (`PR_SET_PDEATHSIG` follows
/// the parent thread), so call it from a thread that lives as long as the box should.
///
/// `prepare` runs with the launcher's PID before the launcher does anything (it waits for
/// the spec): whatever it sets up, such as cgroup membership, every box process inherits.
pub fn launch(
    exe: &Path,
    spec: &BoxSpec,
    log: Option<std::fs::File>,
    prepare: impl FnOnce(u32) -> Result<(), String>,
) -> Result<Running, SandboxError> {
    let (ours, theirs) = ipc::pair()?;
    let raw = theirs.as_raw_fd();
    let mut cmd = Command::new(exe);
    cmd.arg("__box-init").stdin(Stdio::null());
    match log {
        Some(f) => {
            let f2 = f.try_clone().map_err(SandboxError::Spawn)?;
            cmd.stdout(f).stderr(f2);
        }
        None => {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if raw == CTL_FD {
                if libc::fcntl(raw, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, CTL_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut launcher = cmd.spawn().map_err(SandboxError::Spawn)?;
    drop(theirs);
    if let Err(e) = prepare(launcher.id()) {
        let _ = launcher.kill();
        let _ = launcher.wait();
        return Err(SandboxError::Setup(e));
    }
    ipc::send(&ours, spec, &[])?;
    let mut pid1_host = None;
    let mut ready = false;
    // The launcher reports PID 1's host PID and PID 1 reports that it is ready: two
    // processes writing to one socket, so the two messages may come in either order.
    while !(ready && pid1_host.is_some()) {
        match ipc::recv::<FromInit>(&ours) {
            Ok((FromInit::Pid1 { host_pid }, _)) => pid1_host = Some(host_pid),
            Ok((FromInit::Ready, _)) => ready = true,
            Ok((FromInit::SetupFailed { error }, _)) => {
                let _ = launcher.wait();
                return Err(SandboxError::Setup(error));
            }
            Ok((other, _)) => {
                return Err(SandboxError::Setup(format!("unexpected message {other:?}")))
            }
            Err(e) => {
                let _ = launcher.kill();
                let _ = launcher.wait();
                return Err(SandboxError::Setup(format!(
                    "the box's first process ended during setup ({e})"
                )));
            }
        }
    }
    let pid1_host = pid1_host.expect("the loop ends only once PID 1's host PID is known");
    Ok(Running {
        launcher,
        ctl: ours,
        pid1_host,
    })
}

impl Running {
    /// Kill every process of the box and wait until they are all gone (and with them the
    /// box's mounts).
    pub fn kill(mut self) {
        // SAFETY: plain kill of the box's PID 1 (its PID namespace dies with it).
        unsafe { libc::kill(self.pid1_host, libc::SIGKILL) };
        // The launcher reaps PID 1 only after the kernel has killed the whole namespace.
        let _ = self.launcher.wait();
    }
}
