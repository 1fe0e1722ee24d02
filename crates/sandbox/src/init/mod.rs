//! The box's first processes: the launcher (creates the namespaces, forks PID 1, waits for
//! it) and PID 1 (builds the root filesystem, pivots into it, then starts the processes the
//! supervisor asks for and reaps every zombie).
//!
//! Process tree and lifetimes: supervisor → launcher (`agentbox __box-init`, new mount,
//! UTS, IPC and optionally network namespaces) → PID 1 (new PID namespace) → box
//! processes. The launcher dies with the supervisor thread that started it and PID 1 dies
//! with the launcher (`PR_SET_PDEATHSIG`); when PID 1 dies the kernel kills everything in
//! its PID namespace, and the mount namespace (with the box's overlay) goes away with the
//! last of them. A killed supervisor therefore never leaks box processes or mounts.
//!
//! Everything here runs single-threaded: `unshare` and `fork` are only sound that way.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use crate::ipc;
use crate::proto::{Bind, BoxSpec, FromInit, Network, TmpfsSizes, ToInit};

mod kernel;
mod rootfs;
mod serve;
mod spawn;

pub use self::rootfs::host_skeleton;
use self::{rootfs::*, serve::*, spawn::*};

/// Descriptor number of the control socket in the launcher.
pub const CTL_FD: RawFd = 3;

/// Entry point of `agentbox __box-init`. The box's spec arrives as the first message on the
/// control socket (not in argv, where every process could read it in `/proc/1/cmdline`).
/// Never returns.
pub fn launcher_main() -> ! {
    // SAFETY: the supervisor placed the control socket at CTL_FD before exec; nothing else
    // in this fresh process owns it.
    let ctl = unsafe { OwnedFd::from_raw_fd(CTL_FD) };
    // dup2 cleared close-on-exec; no box process may inherit the control socket.
    let _ = rustix::io::fcntl_setfd(&ctl, rustix::io::FdFlags::CLOEXEC);
    let spec: BoxSpec = match ipc::recv(&ctl) {
        Ok((s, _)) => s,
        Err(e) => fail(&ctl, format!("reading the box specification: {e}")),
    };
    protect_from_oom();
    // Before the PID namespace: the namespace is made by a child this process must find in
    // the host's /proc.
    let userns = match spec.ids {
        Some(range) if !spec.rootless => match crate::idmap::BoxUserNs::create(range) {
            Ok(ns) => Some(ns),
            Err(e) => fail(&ctl, e),
        },
        _ => None,
    };
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC;
    if spec.network.own_namespace() {
        flags |= libc::CLONE_NEWNET;
    }
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    if spec.rootless {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: plain syscall; this process is single-threaded.
    if unsafe { libc::unshare(flags) } != 0 {
        let e = std::io::Error::last_os_error();
        let why = if spec.rootless {
            crate::userns::blocked_reason()
        } else {
            String::new()
        };
        fail(
            &ctl,
            format!("creating the box's namespaces failed: {e}{why}"),
        );
    }
    if spec.rootless {
        // Ourselves as root inside: the only mapping an unprivileged process may write.
        for (file, content) in [
            ("/proc/self/setgroups", "deny".to_owned()),
            ("/proc/self/uid_map", format!("0 {} 1", uid.as_raw())),
            ("/proc/self/gid_map", format!("0 {} 1", gid.as_raw())),
        ] {
            if let Err(e) = std::fs::write(file, content) {
                fail(&ctl, format!("writing {file}: {e}"));
            }
        }
    }
    // SAFETY: single-threaded, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        fail(&ctl, format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        pid1(spec, ctl, userns);
    }
    // From here on the launcher only waits. Without capabilities it is the box process
    // whose namespaces the network helper may open (`net::Pasta::attach`): the kernel lets
    // a process open another's namespaces only when the other holds no capability it
    // lacks. Dropped before PID 1 is announced, so before the supervisor looks.
    if let Err(e) = crate::caps::drop_all() {
        fail(&ctl, format!("dropping the launcher's capabilities: {e}"));
    }
    let _ = ipc::send(&ctl, &FromInit::Pid1 { host_pid: pid }, &[]);
    // Only PID 1 keeps the socket: its end-of-file then means PID 1 is gone.
    drop(ctl);
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    std::process::exit(0)
}

fn fail(ctl: &OwnedFd, error: String) -> ! {
    let _ = ipc::send(ctl, &FromInit::SetupFailed { error }, &[]);
    std::process::exit(1)
}

/// `/proc/self/oom_score_adj`, where the OOM killer's preference for a process is set.
const OOM_SCORE_ADJ: &std::ffi::CStr = c"/proc/self/oom_score_adj";

/// The OOM-killer setting of every box process: the killer's first choice, before the
/// box's PID 1 (whose setting is lower, see [`protect_from_oom`]) and before the host's own
/// processes when the whole machine runs out. Raising it needs no privilege.
const BOX_OOM_ADJ: &[u8] = b"500";

/// Take this launcher (and so PID 1, which inherits it) out of the OOM killer's choice where
/// the kernel lets us (`CAP_SYS_RESOURCE`; a rootless box, or a host that withholds it,
/// keeps the setting it started with). Either way box processes are set above it
/// ([`BOX_OOM_ADJ`]): when the box hits its memory limit, the process that used the memory
/// dies, not the box.
fn protect_from_oom() {
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
}

fn pid1(spec: BoxSpec, ctl: OwnedFd, userns: Option<crate::idmap::BoxUserNs>) -> ! {
    // SAFETY: plain prctl; dies with the launcher, which dies with the supervisor.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let setup = if spec.rootless {
        setup_root_rootless(&mut kernel::Linux::default(), &spec).map(|()| false)
    } else {
        setup_root(&mut kernel::Linux::default(), &spec, userns.as_ref())
    };
    match (setup, userns) {
        (Err(e), _) => fail(&ctl, e),
        (Ok(true), Some(ns)) => {
            if let Err(e) = ns.enter() {
                fail(&ctl, e);
            }
        }
        _ => {}
    }
    let sfd = match block_sigchld() {
        Ok(fd) => fd,
        Err(e) => fail(&ctl, format!("signalfd: {e}")),
    };
    let hardening = match Hardening::for_box(&spec) {
        Ok(h) => h,
        Err(e) => fail(&ctl, e),
    };
    if ipc::send(&ctl, &FromInit::Ready, &[]).is_err() {
        std::process::exit(1);
    }
    serve(&ctl, &sfd, &hardening);
}

/// What every box process gets between `fork` and `exec`, prepared once by PID 1.
struct Hardening {
    /// Capabilities taken out of the bounding set.
    drop_caps: Vec<u32>,
    filters: crate::seccomp::BoxFilters,
}

impl Hardening {
    fn for_box(spec: &BoxSpec) -> Result<Hardening, String> {
        Ok(Hardening {
            drop_caps: dropped_capabilities(spec.network),
            filters: crate::seccomp::BoxFilters::build()?,
        })
    }
}

/// In a forked child: report errno through the pipe and exit 127.
unsafe fn child_fail(fd: RawFd) -> ! {
    // SAFETY: async-signal-safe calls only.
    unsafe {
        let e = (*libc::__errno_location()).to_ne_bytes();
        libc::write(fd, e.as_ptr().cast(), 4);
        libc::_exit(127)
    }
}
