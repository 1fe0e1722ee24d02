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
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use crate::ipc;
use crate::proto::{Bind, BoxSpec, FromInit, Network, TmpfsSizes, ToInit};

/// Descriptor number of the control socket in the launcher.
pub const CTL_FD: RawFd = 3;

/// Device nodes bound from the host into the box's private `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

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
        setup_root_rootless(&spec).map(|()| false)
    } else {
        setup_root(&spec, userns.as_ref())
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

// ---- the root filesystem ---------------------------------------------------------------

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

fn mount(
    src: &str,
    target: &Path,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), String> {
    let data = CString::new(data).map_err(|e| err("mount options", e))?;
    rustix::mount::mount(src, target, fstype, flags, data.as_c_str()).map_err(|e| {
        err(
            format!(
                "mounting {fstype} at {} ({})",
                target.display(),
                data.to_string_lossy()
            ),
            std::io::Error::from(e),
        )
    })
}

fn path_str(p: &Path) -> Result<&str, String> {
    let s = p.to_str().ok_or_else(|| {
        format!(
            "{} is not UTF-8; overlay layers need UTF-8 paths",
            p.display()
        )
    })?;
    if s.contains([',', ':', '\\']) {
        return Err(format!(
            "{s} contains ',', ':' or '\\', which overlayfs cannot take in a layer path"
        ));
    }
    Ok(s)
}

fn mkdir_p(p: &Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| err(format!("creating {}", p.display()), e))
}

/// `rel` below `root`, refusing anything but plain components.
fn under(root: &Path, abs: &Path) -> Result<PathBuf, String> {
    let mut out = root.to_owned();
    for c in abs.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => out.push(n),
            _ => return Err(format!("{} is not a plain absolute path", abs.display())),
        }
    }
    Ok(out)
}

/// Make every mount private, and mount PID 1's scratch tmpfs (only this namespace sees it).
fn private_scratch(spec: &BoxSpec) -> Result<PathBuf, String> {
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| err("making mounts private", std::io::Error::from(e)))?;
    mkdir_p(&spec.scratch)?;
    mount(
        "agentbox",
        &spec.scratch,
        "tmpfs",
        MountFlags::empty(),
        "mode=755",
    )?;
    Ok(spec.scratch.clone())
}

/// Host name, loopback, then make `root` the root: the old root is stacked on the new one
/// and detached, so no directory for it is needed inside the box.
fn enter_root(root: &Path, spec: &BoxSpec) -> Result<(), String> {
    rustix::system::sethostname(spec.hostname.as_bytes())
        .map_err(|e| err("setting the host name", std::io::Error::from(e)))?;
    if spec.network.own_namespace() {
        loopback_up()?;
    }
    rustix::process::chdir(root)
        .map_err(|e| err("chdir to the new root", std::io::Error::from(e)))?;
    rustix::process::pivot_root(".", ".")
        .map_err(|e| err("pivot_root", std::io::Error::from(e)))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| err("detaching the host's root", std::io::Error::from(e)))?;
    rustix::process::chdir("/").map_err(|e| err("chdir /", std::io::Error::from(e)))?;
    Ok(())
}

/// Build the box's root and pivot into it. With `userns`, every layer is reached through an
/// idmapped mount and the files are made as box root (see [`crate::idmap`]); returns
/// whether that was done — a base whose file system cannot be idmapped (an overlayfs `/`,
/// when agentbox itself runs in a container) leaves box root as host root, said in the
/// supervisor's log, with the rest of the hardening unchanged.
fn setup_root(spec: &BoxSpec, userns: Option<&crate::idmap::BoxUserNs>) -> Result<bool, String> {
    let scratch = &private_scratch(spec)?;
    let (empty, base, root) = (scratch.join("e"), scratch.join("b"), scratch.join("r"));
    for d in [&empty, &base, &root] {
        mkdir_p(d)?;
    }
    hide_dirs(&empty, &spec.base, &spec.hide)?;
    let mapped = match userns {
        Some(ns) => {
            let (me, mb) = (scratch.join("m/e"), scratch.join("m/b"));
            mkdir_p(&me)?;
            mkdir_p(&mb)?;
            match ns
                .idmapped_mount(&empty, &me)
                .and_then(|()| ns.idmapped_mount(&spec.base, &mb))
            {
                Ok(()) => Some((ns, me, mb)),
                Err(e) => {
                    eprintln!("box root stays host root (no user namespace): {e}");
                    None
                }
            }
        }
        None => None,
    };
    let (lower_empty, lower_base) = match &mapped {
        Some((_, me, mb)) => (me.clone(), mb.clone()),
        None => (empty.clone(), spec.base.clone()),
    };
    // The base goes through a read-only overlay of its own (an empty tmpfs layer over it):
    // overlayfs refuses a lower layer that is an ancestor of another layer's directory, and
    // the store usually lives on the base's filesystem. The wrapper is a new filesystem,
    // so the box's layers are no longer below any layer root. It also carries the opaque
    // directories that hide host paths.
    mount(
        "agentbox",
        &base,
        "overlay",
        MountFlags::RDONLY,
        &format!(
            "lowerdir={}:{}",
            path_str(&lower_empty)?,
            path_str(&lower_base)?
        ),
    )?;
    let ns = mapped.as_ref().map(|(ns, ..)| *ns);
    if let Some(ns) = ns {
        ns.act_on_files_as_box_root()?;
    }
    mount_box_root(
        spec,
        &root,
        Some(&base),
        ns.map(|ns| (ns, scratch.as_path())),
    )?;
    let resolv = std::fs::read("/etc/resolv.conf").ok();
    special_mounts(&root, spec, ns)?;
    if spec.network == Network::Private {
        private_resolv_conf(scratch, &root, resolv.as_deref())?;
        if spec.base != Path::new("/") {
            share_host_file(scratch, &root, "etc/hosts")?;
        }
    } else if spec.base != Path::new("/") && spec.network == Network::Host {
        // An image's own name-service files describe some other machine's network.
        for file in ["etc/resolv.conf", "etc/hosts"] {
            share_host_file(scratch, &root, file)?;
        }
    } else if let Some(content) = resolv {
        provide_resolv_conf(&root, &content)?;
    }
    enter_root(&root, spec)?;
    Ok(ns.is_some())
}

/// Mount the box's root overlay at `root`: its layers (over `base`, when given) with its
/// working upper directory. A rootless box's overlay is an unprivileged one (`userxattr`,
/// which keeps redirects and metacopy off itself and refuses them as options). With
/// `mapped`, each layer and the upper directory's parent are idmapped mounts made below its
/// scratch directory, and the overlay is mounted as box root (see [`crate::idmap`]).
fn mount_box_root(
    spec: &BoxSpec,
    root: &Path,
    base: Option<&Path>,
    mapped: Option<(&crate::idmap::BoxUserNs, &Path)>,
) -> Result<(), String> {
    let (mut lowers, upper, workdir) = match mapped {
        None => (
            spec.lowers.clone(),
            spec.upper.clone(),
            spec.workdir.clone(),
        ),
        Some((ns, scratch)) => {
            let mut lowers = Vec::new();
            for (i, l) in spec.lowers.iter().enumerate() {
                let at = scratch.join(format!("m/{i}"));
                mkdir_p(&at)?;
                ns.idmapped_mount(l, &at)?;
                lowers.push(at);
            }
            // Upper and work directory must be on one mount: their common parent.
            let (Some(parent), Some(u), Some(w)) = (
                spec.upper.parent(),
                spec.upper.file_name(),
                spec.workdir.file_name(),
            ) else {
                return Err("the box's upper directory has no parent".into());
            };
            if spec.workdir.parent() != Some(parent) {
                return Err(format!(
                    "{} and {} are not in one directory",
                    spec.upper.display(),
                    spec.workdir.display()
                ));
            }
            let at = scratch.join("m/u");
            mkdir_p(&at)?;
            ns.idmapped_mount(parent, &at)?;
            (lowers, at.join(u), at.join(w))
        }
    };
    if let Some(b) = base {
        lowers.push(b.to_owned());
    }
    let lowers = lowers
        .iter()
        .map(|l| path_str(l))
        .collect::<Result<Vec<_>, _>>()?;
    let mode = if spec.rootless {
        "userxattr"
    } else {
        "redirect_dir=off,metacopy=off"
    };
    // `nodev`: a device node in the box's layer (a bundle's, or one made before the box
    // lost CAP_MKNOD) can never be opened as a device.
    mount(
        "agentbox",
        root,
        "overlay",
        MountFlags::NODEV,
        &format!(
            "lowerdir={},upperdir={},workdir={},{mode},index=off,xino=off",
            lowers.join(":"),
            path_str(&upper)?,
            path_str(&workdir)?
        ),
    )
}

/// Directories of `/` a rootless box does not take from the host: its own (`/workspace`,
/// `/root`, `/home`) and the ones it mounts fresh.
const NOT_BOUND: &[&str] = &[
    "proc",
    "sys",
    "dev",
    "tmp",
    "run",
    "root",
    "home",
    "workspace",
    "lost+found",
];

/// The root of a rootless box: the box's layer as an overlay (`userxattr`: its markers are
/// `user.overlay.*`), with the host's top-level directories bound read-only on the mount
/// points its first layer holds (see [`host_skeleton`]).
fn setup_root_rootless(spec: &BoxSpec) -> Result<(), String> {
    let scratch = &private_scratch(spec)?;
    let root = scratch.join("r");
    mkdir_p(&root)?;
    mount_box_root(spec, &root, None, None)?;
    for entry in std::fs::read_dir("/")
        .map_err(|e| err("reading /", e))?
        .flatten()
    {
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        let host = Path::new("/").join(n);
        let target = root.join(n);
        if NOT_BOUND.contains(&n) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // Only where the layer has the mount point: nothing is written to make one.
        if !std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        rustix::mount::mount(&host, &target, "", MountFlags::BIND | MountFlags::REC, c"").map_err(
            |e| {
                err(
                    format!("binding {}", host.display()),
                    std::io::Error::from(e),
                )
            },
        )?;
        // Read-only where the kernel lets us change it (a mount locked read-write stays so;
        // the user could write there on the host anyway).
        let _ = rustix::mount::mount_remount(&target, MountFlags::BIND | MountFlags::RDONLY, "");
    }
    for h in &spec.hide {
        let inside = under(&root, h)?;
        if h.parent().is_some() && std::fs::metadata(&inside).is_ok_and(|m| m.is_dir()) {
            mount("agentbox", &inside, "tmpfs", MountFlags::RDONLY, "size=4k")?;
        }
    }
    let resolv = std::fs::read("/etc/resolv.conf").ok();
    special_mounts(&root, spec, None)?;
    if spec.network == Network::Private {
        private_resolv_conf(scratch, &root, resolv.as_deref())?;
    }
    enter_root(&root, spec)
}

/// The skeleton a rootless box's first layer needs, made in `dir`: an empty directory for
/// every top-level directory of the host (mount points for the host's directories and for
/// `/proc`, `/dev`, …) and the host's top-level symlinks (`/bin -> usr/bin`).
pub fn host_skeleton(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir("/")?.flatten() {
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        let target = dir.join(n);
        if n == "lost+found" || std::fs::symlink_metadata(&target).is_ok() {
            continue;
        }
        let ft = entry.file_type()?;
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if ft.is_dir() {
            std::fs::create_dir(&target)?;
            let mode = match n {
                "tmp" => 0o1777,
                "root" => 0o700,
                _ => 0o755,
            };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Create, in the empty top layer of the base, an opaque directory for every hidden path
/// that is a directory of the base, with the host directory's owner and mode (and the same
/// for the directories above it, whose attributes the overlay now takes from this layer).
fn hide_dirs(empty: &Path, base: &Path, hide: &[PathBuf]) -> Result<(), String> {
    let mut hide = hide.to_vec();
    hide.sort();
    let mut done: Vec<&PathBuf> = Vec::new();
    for h in &hide {
        // Below something already hidden: nothing more to do.
        if done.iter().any(|d| h.starts_with(d)) {
            continue;
        }
        let host = under(base, h)?;
        // Followed: a symlink to a directory is hidden as a directory.
        let Ok(md) = std::fs::metadata(&host) else {
            continue;
        };
        done.push(h);
        let Some(parent) = h.parent() else {
            continue;
        };
        // The directories above it, with the host's owner and mode (the overlay now shows
        // this layer's attributes for them).
        let mut host_dir = base.to_owned();
        let mut dir = empty.to_owned();
        for c in parent.components().skip(1) {
            host_dir.push(c);
            dir.push(c);
            if dir.exists() {
                continue;
            }
            mkdir_p(&dir)?;
            copy_owner_mode(&host_dir, &dir);
        }
        let inside = dir.join(h.file_name().expect("a path with a parent has a name"));
        let hidden = if md.is_dir() {
            // An empty, opaque directory: the base's content is not looked at.
            mkdir_p(&inside)?;
            copy_owner_mode(&host, &inside);
            rustix::fs::setxattr(
                &inside,
                "trusted.overlay.opaque",
                b"y",
                rustix::fs::XattrFlags::empty(),
            )
        } else {
            // A whiteout: the file is not there at all.
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &inside,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::empty(),
                0,
            )
        };
        hidden.map_err(|e| err(format!("hiding {}", h.display()), std::io::Error::from(e)))?;
    }
    Ok(())
}

fn copy_owner_mode(from: &Path, to: &Path) {
    if let Ok(m) = std::fs::metadata(from) {
        let _ = rustix::fs::chown(
            to,
            Some(rustix::fs::Uid::from_raw(m.uid())),
            Some(rustix::fs::Gid::from_raw(m.gid())),
        );
        let _ = std::fs::set_permissions(to, std::fs::Permissions::from_mode(m.mode() & 0o7777));
    }
}

/// `/proc`, `/sys`, a minimal `/dev`, private `/tmp` and `/run`, and the binds.
fn special_mounts(
    root: &Path,
    spec: &BoxSpec,
    ns: Option<&crate::idmap::BoxUserNs>,
) -> Result<(), String> {
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV;
    let proc_ = root.join("proc");
    mkdir_p(&proc_)?;
    mount("proc", &proc_, "proc", nosuid | MountFlags::NOEXEC, "")?;
    protect_proc(&proc_)?;
    let sys = root.join("sys");
    mkdir_p(&sys)?;
    if spec.rootless && spec.network == Network::Host {
        // A fresh sysfs needs a network namespace of our own: show the host's, read-only.
        rustix::mount::mount(
            Path::new("/sys"),
            &sys,
            "",
            MountFlags::BIND | MountFlags::REC,
            c"",
        )
        .map_err(|e| err("binding /sys", std::io::Error::from(e)))?;
        let _ = rustix::mount::mount_remount(&sys, MountFlags::BIND | MountFlags::RDONLY, "");
    } else {
        mount(
            "sysfs",
            &sys,
            "sysfs",
            nosuid | MountFlags::NOEXEC | MountFlags::RDONLY,
            "",
        )?;
    }
    mask_dir(&sys.join("firmware"))?;
    let dev = root.join("dev");
    mkdir_p(&dev)?;
    // `nodev` too: the device nodes below are bind mounts of the host's, which keep their
    // own mount's flags; nothing else in the box's /dev can be opened as a device.
    mount(
        "agentbox",
        &dev,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV,
        "mode=755,size=1m",
    )?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        let inside = dev.join(name);
        std::fs::File::create(&inside)
            .map_err(|e| err(format!("creating {}", inside.display()), e))?;
        rustix::mount::mount_bind(&host, &inside).map_err(|e| {
            err(
                format!("binding {}", host.display()),
                std::io::Error::from(e),
            )
        })?;
    }
    let pts = dev.join("pts");
    mkdir_p(&pts)?;
    mount(
        "devpts",
        &pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "newinstance,ptmxmode=0666,mode=620",
    )?;
    let shm = dev.join("shm");
    mkdir_p(&shm)?;
    let sizes = spec.tmpfs;
    let sized = |mode: &str, bytes: u64| format!("mode={mode}{}", TmpfsSizes::option(bytes));
    mount("shm", &shm, "tmpfs", nosuid, &sized("1777", sizes.shm))?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))
            .map_err(|e| err(format!("creating /dev/{link}"), e))?;
    }
    let tmp = root.join("tmp");
    mkdir_p(&tmp)?;
    mount("tmp", &tmp, "tmpfs", nosuid, &sized("1777", sizes.tmp))?;
    let run = root.join("run");
    mkdir_p(&run)?;
    mount("run", &run, "tmpfs", nosuid, &sized("755", sizes.run))?;
    for b in &spec.binds {
        bind(root, b, ns)?;
    }
    Ok(())
}

/// Entries of `/proc` that are the host kernel's knobs: read-only in the box (as Docker's
/// `ReadonlyPaths`). `/proc/sys` holds `kernel.core_pattern` (a pipe to a program the host
/// kernel runs as root), `vm.drop_caches`, and, on the host's network, the host's
/// `net.*` settings.
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// Files of `/proc` that expose host kernel state: replaced by an empty file (as Docker's
/// `MaskedPaths`).
const PROC_MASKED_FILES: &[&str] = &[
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "timer_stats",
    "kmsg",
];
/// Directories of `/proc` masked by an empty read-only directory.
const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi", "asound"];

/// Make the host kernel's knobs in the box's fresh `/proc` read-only, and mask what exposes
/// host kernel state. Every step must succeed: a box never starts with them writable.
fn protect_proc(proc_: &Path) -> Result<(), String> {
    for name in PROC_READ_ONLY {
        let p = proc_.join(name);
        if !p.exists() {
            continue;
        }
        rustix::mount::mount_bind(&p, &p)
            .map_err(|e| err(format!("binding /proc/{name}"), std::io::Error::from(e)))?;
        rustix::mount::mount_remount(
            &p,
            MountFlags::BIND
                | MountFlags::RDONLY
                | MountFlags::NOSUID
                | MountFlags::NODEV
                | MountFlags::NOEXEC,
            "",
        )
        .map_err(|e| {
            err(
                format!("making /proc/{name} read-only"),
                std::io::Error::from(e),
            )
        })?;
    }
    for name in PROC_MASKED_FILES {
        let p = proc_.join(name);
        if p.exists() {
            rustix::mount::mount_bind(Path::new("/dev/null"), &p)
                .map_err(|e| err(format!("masking /proc/{name}"), std::io::Error::from(e)))?;
        }
    }
    for name in PROC_MASKED_DIRS {
        mask_dir(&proc_.join(name))?;
    }
    Ok(())
}

/// Hide directory `p` (when it exists) under an empty read-only tmpfs.
fn mask_dir(p: &Path) -> Result<(), String> {
    if !p.is_dir() {
        return Ok(());
    }
    mount(
        "agentbox-masked",
        p,
        "tmpfs",
        MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        "size=0,mode=555",
    )
}

/// Bind host path `b.src` at `b.dst` below `/run` in the box; with `ns`, idmapped where its
/// file system allows (so the host's root-owned files are box root's), else a plain bind
/// (host root's files are then owned by nobody in the box, readable as their modes say).
fn bind(root: &Path, b: &Bind, ns: Option<&crate::idmap::BoxUserNs>) -> Result<(), String> {
    if !b.dst.starts_with("/run/") {
        return Err(format!("bind target {} is not below /run", b.dst.display()));
    }
    let target = under(root, &b.dst)?;
    let is_dir = std::fs::metadata(&b.src)
        .map_err(|e| err(format!("bind source {}", b.src.display()), e))?
        .is_dir();
    if let Some(parent) = target.parent() {
        mkdir_p(parent)?;
    }
    if is_dir {
        mkdir_p(&target)?;
    } else {
        std::fs::File::create(&target)
            .map_err(|e| err(format!("creating {}", target.display()), e))?;
    }
    if ns.is_none_or(|ns| ns.idmapped_mount(&b.src, &target).is_err()) {
        rustix::mount::mount_bind(&b.src, &target).map_err(|e| {
            err(
                format!("binding {}", b.src.display()),
                std::io::Error::from(e),
            )
        })?;
    }
    if b.readonly {
        rustix::mount::mount_remount(
            &target,
            MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
            "",
        )
        .map_err(|e| {
            err(
                format!("making {} read-only", b.dst.display()),
                std::io::Error::from(e),
            )
        })?;
    }
    Ok(())
}

/// Show the host's `/<file>` at the same place in the box (a read-only bind of a private
/// copy, so the box can neither change the host's file nor see later host edits).
fn share_host_file(scratch: &Path, root: &Path, file: &str) -> Result<(), String> {
    let Ok(content) = std::fs::read(Path::new("/").join(file)) else {
        return Ok(());
    };
    bind_content(scratch, root, file, &content)
}

/// The private network's `/etc/resolv.conf` (see [`crate::net::resolv_conf`]). Where the
/// base's file is a symlink into `/run` (systemd-resolved), the content goes at its target
/// in the box's own `/run`, so the box's layer is not touched; otherwise a read-only bind
/// covers the file.
fn private_resolv_conf(scratch: &Path, root: &Path, host: Option<&[u8]>) -> Result<(), String> {
    let content =
        crate::net::resolv_conf(&String::from_utf8_lossy(host.unwrap_or_default())).into_bytes();
    let etc = root.join("etc/resolv.conf");
    if let Ok(target) = std::fs::read_link(&etc) {
        // Lexically (`../run/…` is the usual spelling): the box's tree is not looked up.
        let mut abs = PathBuf::from(if target.is_absolute() { "/" } else { "/etc" });
        for c in target.components() {
            match c {
                Component::ParentDir => {
                    abs.pop();
                }
                Component::Normal(n) => abs.push(n),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        if abs.starts_with("/run/") {
            let inside = under(root, &abs)?;
            if let Some(parent) = inside.parent() {
                mkdir_p(parent)?;
            }
            return std::fs::write(&inside, content)
                .map_err(|e| err(format!("writing {}", inside.display()), e));
        }
    }
    bind_content(scratch, root, "etc/resolv.conf", &content)
}

/// Show `content` at `/<file>` in the box: a read-only bind of a copy in the scratch tmpfs.
fn bind_content(scratch: &Path, root: &Path, file: &str, content: &[u8]) -> Result<(), String> {
    let copy = scratch.join(file.replace('/', "_"));
    std::fs::write(&copy, content).map_err(|e| err(format!("writing {}", copy.display()), e))?;
    let target = root.join(file);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&target).map_err(|e| err(format!("replacing /{file}"), e))?;
    }
    if !target.exists() {
        if let Some(parent) = target.parent() {
            mkdir_p(parent)?;
        }
        std::fs::File::create(&target).map_err(|e| err(format!("creating /{file}"), e))?;
    }
    rustix::mount::mount_bind(&copy, &target)
        .map_err(|e| err(format!("binding /{file}"), std::io::Error::from(e)))
}

/// `/etc/resolv.conf` is often a symlink into `/run` (systemd-resolved), which is private in
/// the box: recreate its target there with the host's content.
fn provide_resolv_conf(root: &Path, content: &[u8]) -> Result<(), String> {
    let etc = root.join("etc/resolv.conf");
    if std::fs::metadata(&etc).is_ok() {
        return Ok(());
    }
    let Ok(target) = std::fs::read_link(&etc) else {
        return Ok(());
    };
    let abs = if target.is_absolute() {
        target
    } else {
        Path::new("/etc").join(target)
    };
    if !abs.starts_with("/run/") {
        return Ok(());
    }
    let inside = under(root, &abs)?;
    if let Some(parent) = inside.parent() {
        mkdir_p(parent)?;
    }
    std::fs::write(&inside, content).map_err(|e| err(format!("writing {}", inside.display()), e))
}

/// Bring up `lo` in a fresh network namespace.
fn loopback_up() -> Result<(), String> {
    // SAFETY: a datagram socket and two ioctls on a zeroed, correctly sized ifreq.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(err("socket", std::io::Error::last_os_error()));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let r = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req);
        if r == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
        }
        let e = std::io::Error::last_os_error();
        libc::close(s);
        if r != 0 {
            return Err(err("bringing up the loopback interface", e));
        }
    }
    Ok(())
}

// ---- serving the supervisor -------------------------------------------------------------

fn block_sigchld() -> std::io::Result<OwnedFd> {
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

fn serve(ctl: &OwnedFd, sfd: &OwnedFd, hardening: &Hardening) -> ! {
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

fn reap(ctl: &OwnedFd, tracked: &mut std::collections::BTreeSet<i32>) {
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

fn handle(
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

fn cstring(s: impl AsRef<OsStr>) -> Result<CString, String> {
    CString::new(s.as_ref().as_bytes()).map_err(|_| "an argument contains a NUL byte".to_owned())
}

/// Candidate executables for `argv0`: itself when it has a slash, else each `PATH` entry.
fn candidates(argv0: &str, env: &[(String, String)]) -> Result<Vec<CString>, String> {
    if argv0.contains('/') {
        return Ok(vec![cstring(argv0)?]);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cstring(Path::new(d).join(argv0)))
        .collect()
}

/// Capabilities a box keeps (the set container engines grant by default, less two): enough
/// for package managers and servers, not for mounting, loading modules, changing the host's
/// network or clock, or reaching files outside the box by handle (`CAP_DAC_READ_SEARCH`).
/// `CAP_MKNOD` is not kept (a block device node of a host disk would read it; the box's
/// `/dev` is made for it), nor `CAP_NET_RAW` on the host's network (raw sockets see the
/// host's traffic, loopback included).
const KEPT_CAPS: &[u32] = &[
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    13, // CAP_NET_RAW (not on the host's network: see `dropped_capabilities`)
    18, // CAP_SYS_CHROOT
    29, // CAP_AUDIT_WRITE
    31, // CAP_SETFCAP
];

/// Every capability this kernel knows that a box on `network` does not keep (raw sockets
/// in a namespace of the box's own see only the box's traffic).
fn dropped_capabilities(network: Network) -> Vec<u32> {
    const CAP_NET_RAW: u32 = 13;
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(40);
    (0..=last)
        .filter(|c| !KEPT_CAPS.contains(c) || (*c == CAP_NET_RAW && network == Network::Host))
        .collect()
}

/// Why a spawn failed, with the status a shell would give it (127: not found, else 126).
struct SpawnError {
    message: String,
    status: i32,
}

impl From<String> for SpawnError {
    fn from(message: String) -> Self {
        SpawnError {
            message,
            status: 126,
        }
    }
}

impl From<&str> for SpawnError {
    fn from(message: &str) -> Self {
        message.to_owned().into()
    }
}

/// The status of a command whose explicit working directory the box does not have: a
/// usage error, as the CLI's own.
const BAD_CWD_STATUS: i32 = 2;

/// Fork and exec one process in its own session, in `cwd` (with `exact_cwd`, only there;
/// otherwise in its nearest existing ancestor). Returns its PID and, with a PTY, the
/// terminal's master side.
fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    exact_cwd: bool,
    pty: Option<crate::proto::WinSize>,
    fds: Vec<OwnedFd>,
    hardening: &Hardening,
) -> Result<(i32, Option<OwnedFd>), SpawnError> {
    let argv0 = argv.first().ok_or("empty command")?;
    // Everything the child needs is prepared before fork.
    let c_argv = argv.iter().map(cstring).collect::<Result<Vec<_>, _>>()?;
    let c_env = env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let paths = candidates(argv0, env)?;
    // The directory and its ancestors, nearest first: a command whose default directory
    // does not exist in the box starts in the nearest one that does. A directory the user
    // named is the only candidate, and its absence is said before anything is forked (the
    // child's failed chdir is reported too, for a directory removed in between).
    if exact_cwd && !Path::new(cwd).is_dir() {
        return Err(bad_cwd(
            cwd,
            &std::io::Error::from_raw_os_error(libc::ENOENT),
        ));
    }
    let c_cwds = std::path::Path::new(cwd)
        .ancestors()
        .take(if exact_cwd { 1 } else { usize::MAX })
        .map(|d| cstring(d.to_string_lossy().as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let drop_caps = &hardening.drop_caps;
    let mut argv_ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|c| c.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = c_env.iter().map(|c| c.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());

    let (master, slave_path) = match pty {
        Some(size) => {
            let master = rustix::pty::openpt(
                rustix::pty::OpenptFlags::RDWR
                    | rustix::pty::OpenptFlags::NOCTTY
                    | rustix::pty::OpenptFlags::CLOEXEC,
            )
            .map_err(|e| err("opening a terminal", std::io::Error::from(e)))?;
            rustix::pty::grantpt(&master).map_err(|e| err("grantpt", std::io::Error::from(e)))?;
            rustix::pty::unlockpt(&master).map_err(|e| err("unlockpt", std::io::Error::from(e)))?;
            let name = rustix::pty::ptsname(&master, Vec::new())
                .map_err(|e| err("ptsname", std::io::Error::from(e)))?;
            let _ = rustix::termios::tcsetwinsize(
                &master,
                rustix::termios::Winsize {
                    ws_row: size.rows,
                    ws_col: size.cols,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                },
            );
            (Some(master), Some(name))
        }
        None => {
            if fds.len() != 3 {
                return Err(format!("expected 3 descriptors, got {}", fds.len()).into());
            }
            (None, None)
        }
    };
    let stdio: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| err("pipe", std::io::Error::from(e)))?;

    // SAFETY: PID 1 is single-threaded; the child only makes syscalls on data prepared above
    // and leaves by exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(err("fork", std::io::Error::last_os_error()).into());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // The runtime ignores SIGPIPE; commands expect the default.
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            libc::setsid();
            // The OOM killer's first choice, before PID 1.
            let fd = libc::open(OOM_SCORE_ADJ.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, BOX_OOM_ADJ.as_ptr().cast(), BOX_OOM_ADJ.len());
                libc::close(fd);
            }
            // Out of the bounding set, so no program the box runs regains them (root's
            // file capabilities are bounded by it).
            for cap in drop_caps {
                libc::prctl(libc::PR_CAPBSET_DROP, *cap as libc::c_ulong, 0, 0, 0);
            }
            // No privilege gained by exec (setuid files, file capabilities), and the
            // system-call filter (which sets no_new_privs itself) for everything the
            // command starts. A box command never runs without it.
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || !hardening.filters.install()
            {
                child_fail(err_w.as_raw_fd());
            }
            if let Some(name) = &slave_path {
                let fd = libc::open(name.as_ptr(), libc::O_RDWR);
                if fd < 0 {
                    child_fail(err_w.as_raw_fd());
                }
                libc::ioctl(fd, libc::TIOCSCTTY, 0);
                for target in 0..3 {
                    libc::dup2(fd, target);
                }
                if fd > 2 {
                    libc::close(fd);
                }
            } else {
                // Move the sources above 2 first so no dup2 overwrites a later source.
                let mut moved = [0; 3];
                for (i, fd) in stdio.iter().enumerate() {
                    moved[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 10);
                }
                for (target, fd) in moved.iter().enumerate() {
                    if *fd < 0 || libc::dup2(*fd, target as i32) < 0 {
                        child_fail(err_w.as_raw_fd());
                    }
                }
            }
            let mut entered = false;
            for d in &c_cwds {
                if libc::chdir(d.as_ptr()) == 0 {
                    entered = true;
                    break;
                }
            }
            if exact_cwd && !entered {
                // A negative errno tells the parent it was the directory, not the program.
                *libc::__errno_location() = -*libc::__errno_location();
                child_fail(err_w.as_raw_fd());
            }
            let mut last = libc::ENOENT;
            for p in &paths {
                libc::execve(p.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr());
                let e = *libc::__errno_location();
                // Keep the most telling error: a permission problem beats "not found".
                if e != libc::ENOENT || last == libc::ENOENT {
                    last = e;
                }
            }
            *libc::__errno_location() = last;
            child_fail(err_w.as_raw_fd());
        }
    }
    drop(err_w);
    drop(fds);
    let mut buf = [0u8; 4];
    let n = rustix::io::read(&err_r, &mut buf).unwrap_or(0);
    if n == 4 {
        let errno = i32::from_ne_bytes(buf);
        let mut status = 0;
        // SAFETY: reaping the child that failed to exec.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if errno < 0 {
            return Err(bad_cwd(cwd, &std::io::Error::from_raw_os_error(-errno)));
        }
        let e = std::io::Error::from_raw_os_error(errno);
        return Err(if errno == libc::ENOENT {
            SpawnError {
                message: format!("{argv0}: command not found in the box"),
                status: 127,
            }
        } else {
            format!("cannot run {argv0}: {e}").into()
        });
    }
    Ok((pid, master))
}

/// The failure of a command whose explicit working directory cannot be entered.
fn bad_cwd(cwd: &str, e: &std::io::Error) -> SpawnError {
    let message = if e.kind() == std::io::ErrorKind::NotFound {
        format!("the working directory {cwd} does not exist in the box")
    } else {
        format!("cannot enter the working directory {cwd} in the box: {e}")
    };
    SpawnError {
        message,
        status: BAD_CWD_STATUS,
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
