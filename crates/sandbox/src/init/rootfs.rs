//! The box's root filesystem, built by PID 1 in its own mount namespace: the base behind
//! its hiding layer, the box's overlay (idmapped for a root box), `/proc` with the kernel's
//! knobs read-only or masked, a minimal `/dev`, private `/tmp` and `/run`, the binds, the
//! name-service files, then `pivot_root`.

use super::*;

/// Device nodes bound from the host into the box's private `/dev`.
pub(super) const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

pub(super) fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

pub(super) fn mount(
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

pub(super) fn path_str(p: &Path) -> Result<&str, String> {
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

pub(super) fn mkdir_p(p: &Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| err(format!("creating {}", p.display()), e))
}

/// `rel` below `root`, refusing anything but plain components.
pub(super) fn under(root: &Path, abs: &Path) -> Result<PathBuf, String> {
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
pub(super) fn private_scratch(spec: &BoxSpec) -> Result<PathBuf, String> {
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
pub(super) fn enter_root(root: &Path, spec: &BoxSpec) -> Result<(), String> {
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
pub(super) fn setup_root(
    spec: &BoxSpec,
    userns: Option<&crate::idmap::BoxUserNs>,
) -> Result<bool, String> {
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
pub(super) fn mount_box_root(
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
pub(super) const NOT_BOUND: &[&str] = &[
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
pub(super) fn setup_root_rootless(spec: &BoxSpec) -> Result<(), String> {
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
pub(super) fn hide_dirs(empty: &Path, base: &Path, hide: &[PathBuf]) -> Result<(), String> {
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

pub(super) fn copy_owner_mode(from: &Path, to: &Path) {
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
pub(super) fn special_mounts(
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
pub(super) const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];

/// Files of `/proc` that expose host kernel state: replaced by an empty file (as Docker's
/// `MaskedPaths`).
pub(super) const PROC_MASKED_FILES: &[&str] = &[
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
pub(super) const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi", "asound"];

/// Make the host kernel's knobs in the box's fresh `/proc` read-only, and mask what exposes
/// host kernel state. Every step must succeed: a box never starts with them writable.
pub(super) fn protect_proc(proc_: &Path) -> Result<(), String> {
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
pub(super) fn mask_dir(p: &Path) -> Result<(), String> {
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
pub(super) fn bind(
    root: &Path,
    b: &Bind,
    ns: Option<&crate::idmap::BoxUserNs>,
) -> Result<(), String> {
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
pub(super) fn share_host_file(scratch: &Path, root: &Path, file: &str) -> Result<(), String> {
    let Ok(content) = std::fs::read(Path::new("/").join(file)) else {
        return Ok(());
    };
    bind_content(scratch, root, file, &content)
}

/// The private network's `/etc/resolv.conf` (see [`crate::net::resolv_conf`]). Where the
/// base's file is a symlink into `/run` (systemd-resolved), the content goes at its target
/// in the box's own `/run`, so the box's layer is not touched; otherwise a read-only bind
/// covers the file.
pub(super) fn private_resolv_conf(
    scratch: &Path,
    root: &Path,
    host: Option<&[u8]>,
) -> Result<(), String> {
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
pub(super) fn bind_content(
    scratch: &Path,
    root: &Path,
    file: &str,
    content: &[u8],
) -> Result<(), String> {
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
pub(super) fn provide_resolv_conf(root: &Path, content: &[u8]) -> Result<(), String> {
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
pub(super) fn loopback_up() -> Result<(), String> {
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
