//! PID 1's loop: requests from the supervisor (spawn, signal) and the exits of its children.

use super::*;

pub(super) fn block_sigchld() -> std::io::Result<OwnedFd> {
    // SAFETY: signal-mask manipulation and signalfd on a properly initialised sigset.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGCHLD);
        if libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

pub(super) fn serve(ctl: &OwnedFd, sfd: &OwnedFd, hardening: &Hardening) -> ! {
    let mut tracked = std::collections::BTreeSet::new();
    loop {
        let mut fds = [
            rustix::event::PollFd::new(ctl, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(sfd, rustix::event::PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => std::process::exit(1),
        }
        let (ctl_ready, sig_ready) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        if sig_ready {
            let mut buf = [0u8; 128];
            while rustix::io::read(sfd, &mut buf).is_ok_and(|n| n > 0) {}
            reap(ctl, &mut tracked);
        }
        if ctl_ready {
            match ipc::recv::<ToInit>(ctl) {
                Ok((msg, fds)) => handle(ctl, msg, fds, &mut tracked, hardening),
                // The supervisor is gone: so is the box.
                Err(ipc::IpcError::Closed) | Err(ipc::IpcError::Io(_)) => std::process::exit(0),
                Err(ipc::IpcError::Malformed(_)) => {}
            }
        }
    }
}

pub(super) fn reap(ctl: &OwnedFd, tracked: &mut std::collections::BTreeSet<i32>) {
    loop {
        let mut status = 0;
        // SAFETY: reaping any child without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        // Orphans re-parented to PID 1 are reaped silently; only spawned processes report.
        if tracked.remove(&pid) {
            let (code, signal) = if libc::WIFEXITED(status) {
                (Some(libc::WEXITSTATUS(status)), None)
            } else if libc::WIFSIGNALED(status) {
                (None, Some(libc::WTERMSIG(status)))
            } else {
                continue;
            };
            let _ = ipc::send(ctl, &FromInit::Exited { pid, code, signal }, &[]);
        }
    }
}

pub(super) fn handle(
    ctl: &OwnedFd,
    msg: ToInit,
    fds: Vec<OwnedFd>,
    tracked: &mut std::collections::BTreeSet<i32>,
    hardening: &Hardening,
) {
    match msg {
        ToInit::Signal { pid, signal } => {
            // SAFETY: plain kill; the group first, the process itself when it has none.
            unsafe {
                if libc::kill(-pid, signal) != 0 {
                    libc::kill(pid, signal);
                }
            }
        }
        ToInit::Spawn {
            id,
            argv,
            env,
            cwd,
            pty,
            exact_cwd,
        } => match spawn(&argv, &env, &cwd, exact_cwd, pty, fds, hardening) {
            Ok((pid, master)) => {
                tracked.insert(pid);
                let attached: Vec<_> = master.iter().map(|m| m.as_fd()).collect();
                let _ = ipc::send(ctl, &FromInit::Started { id, pid }, &attached);
            }
            Err(SpawnError { message, status }) => {
                let _ = ipc::send(
                    ctl,
                    &FromInit::Failed {
                        id,
                        error: message,
                        status,
                    },
                    &[],
                );
            }
        },
    }
}
