//! Box root as an unprivileged range of host ids: the user namespace of a root box and the
//! idmapped mounts that let it own its files.
//!
//! A root box's processes run in a user namespace that maps box ids `0..count` to host ids
//! `uid..uid+count` (see [`IdRange`]). Box root is then host uid `uid`, with capabilities only
//! inside that namespace: every kernel object the box's namespaces do not own — `/proc/sys`,
//! device nodes, the keyring, the host's network, mounts — refuses it by construction, on top
//! of the capability drops and the system-call filter.
//!
//! Files keep their owners on disk. Every layer of the box (the base, the store's layers,
//! the upper directory) is reached through an *idmapped mount* with the same mapping, so a
//! file owned by host root on disk is owned by box root in the box, and a file box root
//! writes is owned by root on disk — the store's layers, bundles and checkouts see exactly
//! what they saw before. So box root owns the host's root-owned files in the base, and its
//! `CAP_DAC_OVERRIDE` applies to them: the base shows none that an unprivileged host user
//! could not read (the box's host view hides them, see `agentbox_boxes::hostview`). Not
//! idmapping the base instead would make them nobody's in the box, and every write of box
//! root to `/usr`, `/etc` or `/var/lib/dpkg` (`apt install`, `useradd`, `echo >> /etc/hosts`)
//! would fail. The root overlay is mounted with the box root's file-system ids
//! (`setfsuid`), because overlayfs creates its work files and copies up with the mounter's
//! ids, which must be mapped in the layers' idmapping.
//!
//! Invariants: the namespace is made by the launcher before the box's PID namespace exists
//! (it must name a process in the host's `/proc`); PID 1 builds every mount as host root
//! and joins the namespace ([`BoxUserNs::enter`]) only after `pivot_root`, so nothing the
//! box runs ever holds host capabilities; the mount, PID, UTS, IPC and network namespaces
//! stay owned by the host's user namespace, so box root can change none of them.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use crate::proto::IdRange;

fn errno(what: impl std::fmt::Display) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// The user namespace of a root box, held open by a descriptor.
pub struct BoxUserNs {
    fd: OwnedFd,
    range: IdRange,
}

impl BoxUserNs {
    /// A new user namespace with `range` as its mapping. Made by a short-lived child
    /// (which only unshares and waits): the namespace outlives it through the descriptor.
    /// Must run in the host's PID namespace, as host root.
    pub fn create(range: IdRange) -> Result<BoxUserNs, String> {
        let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| format!("pipe: {e}"))?;
        let (done_r, done_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| format!("pipe: {e}"))?;
        // SAFETY: the caller is single-threaded; the child makes plain system calls and
        // leaves by _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(errno("fork"));
        }
        if pid == 0 {
            // SAFETY: plain system calls on descriptors this process owns.
            unsafe {
                // Only the parent may hold the write end we wait on, or it never ends.
                libc::close(done_w.as_raw_fd());
                libc::close(ready_r.as_raw_fd());
                let ok: u8 = u8::from(libc::unshare(libc::CLONE_NEWUSER) == 0);
                libc::write(ready_w.as_raw_fd(), (&ok as *const u8).cast(), 1);
                let mut b = 0u8;
                // Until the parent closes its end: the namespace must exist while it is
                // mapped and opened.
                libc::read(done_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        drop((ready_w, done_r));
        let result = (|| {
            let mut ok = [0u8; 1];
            let n = rustix::io::read(&ready_r, &mut ok).map_err(|e| format!("read: {e}"))?;
            if n != 1 || ok[0] != 1 {
                return Err("creating the box's user namespace failed".to_owned());
            }
            let proc = Path::new("/proc").join(pid.to_string());
            for (file, host) in [("uid_map", range.uid), ("gid_map", range.gid)] {
                std::fs::write(proc.join(file), format!("0 {host} {}", range.count))
                    .map_err(|e| format!("writing the box's {file}: {e}"))?;
            }
            let ns = std::fs::File::open(proc.join("ns/user"))
                .map_err(|e| format!("opening the box's user namespace: {e}"))?;
            Ok(OwnedFd::from(ns))
        })();
        drop(done_w);
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        Ok(BoxUserNs { fd: result?, range })
    }

    /// The namespace's descriptor, which an idmapped mount names (see
    /// [`crate::init`]'s kernel seam, where those mounts are made).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A namespace that is none, for a recorded build of a box's root: nothing reaches
    /// the kernel there, so the descriptor (of `/dev/null`) is never used as a namespace.
    #[cfg(test)]
    pub(crate) fn stand_in(range: IdRange) -> BoxUserNs {
        let null = std::fs::File::open("/dev/null").expect("/dev/null opens");
        BoxUserNs {
            fd: OwnedFd::from(null),
            range,
        }
    }

    /// From here on, files this process creates are created as box root (host ids
    /// `range.uid`/`range.gid`), with every capability it holds still effective — as the
    /// overlay's mounter must be (see the module's doc).
    pub fn act_on_files_as_box_root(&self) -> Result<(), String> {
        // PID 1 keeps acting so until it joins the namespace.
        std::mem::forget(ActingAsBoxRoot::start(self.range)?);
        Ok(())
    }

    /// Join the namespace as box root, for good: after this the process holds capabilities
    /// only inside it. `PR_SET_PDEATHSIG` and dumpability, which a credential change clears,
    /// are set again.
    pub fn enter(self) -> Result<(), String> {
        // SAFETY: plain system calls; this process is single-threaded.
        unsafe {
            if libc::setns(self.fd.as_raw_fd(), libc::CLONE_NEWUSER) != 0 {
                return Err(errno("joining the box's user namespace"));
            }
            if libc::setgroups(0, std::ptr::null()) != 0 {
                return Err(errno("setgroups in the box's user namespace"));
            }
            if libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0 {
                return Err(errno("becoming box root"));
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            // A credential change made this process undumpable, which gives its /proc files
            // (and its children's, until they exec) to host root: a box process could not
            // set its own oom_score_adj. Box processes still cannot trace PID 1: it holds
            // capabilities they lack.
            libc::prctl(libc::PR_SET_DUMPABLE, 1);
        }
        Ok(())
    }
}

/// The host ids of box root in the box whose PID 1 is host process `pid`, from its
/// `uid_map` and `gid_map` (`None`: box root is host root, or the box is not running).
pub fn of_process(pid: i32) -> Option<IdRange> {
    let first = |file: &str| -> Option<(u32, u32, u32)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
        let mut f = text.lines().next()?.split_whitespace();
        let parse = |s: Option<&str>| s?.parse::<u32>().ok();
        Some((parse(f.next())?, parse(f.next())?, parse(f.next())?))
    };
    let (inside, uid, count) = first("uid_map")?;
    let (_, gid, _) = first("gid_map")?;
    (inside == 0 && uid != 0).then_some(IdRange { uid, gid, count })
}

/// While alive, the calling *thread* makes and changes files as box root of `range` (host
/// ids `range.uid`/`range.gid`), keeping every capability it has: how the host writes
/// through a running box's root, whose layers are idmapped. Dropping it makes the thread
/// host root again. File-system ids and capabilities are per-thread, so the rest of the
/// process is not affected.
pub struct ActingAsBoxRoot(());

impl ActingAsBoxRoot {
    pub fn start(range: IdRange) -> Result<ActingAsBoxRoot, String> {
        // SAFETY: plain system calls on this thread's own credentials.
        unsafe {
            libc::setfsgid(range.gid);
            libc::setfsuid(range.uid);
        }
        let acting = ActingAsBoxRoot(());
        crate::caps::raise_effective().map_err(|e| format!("raising capabilities: {e}"))?;
        Ok(acting)
    }
}

impl Drop for ActingAsBoxRoot {
    fn drop(&mut self) {
        // Back to fsuid 0, which makes the permitted file-system capabilities effective
        // again.
        // SAFETY: as in `start`.
        unsafe {
            libc::setfsuid(0);
            libc::setfsgid(0);
        }
    }
}
