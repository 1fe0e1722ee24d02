//! The box's root filesystem, built by PID 1 in its own mount namespace: the base behind
//! its hiding layer, the box's overlay (idmapped for a root box), `/proc` with the kernel's
//! knobs read-only or masked, a minimal `/dev`, private `/tmp` and `/run`, the binds, the
//! name-service files, then `pivot_root`.
//!
//! One file (over 600 lines): the mounts' order is the invariant, so the plan is kept
//! reading top to bottom as the sequence PID 1 performs; its tests are in `rootfs/`.
//!
//! Every effect on the kernel goes through [`Kernel`] (the real one is
//! [`super::kernel::Linux`]), so the plan — which mounts, in which order, with which flags,
//! which paths hidden — is unit-tested against a recording (`tests`). This module holds no
//! `unsafe`, and the compiler keeps it so.
//!
//! Invariants the tests hold it to:
//! * all mounts are made private first, so nothing done here reaches the host's mount table;
//! * the box's overlay is mounted before anything is made or mounted below it, and the
//!   layer that hides host paths is complete before the overlay that takes it is mounted;
//! * `/proc` comes with the kernel's knobs read-only and its host-state files masked, or the
//!   box does not start; `/sys` is read-only;
//! * `/dev` is a fresh `nodev` tmpfs holding only [`DEVICES`] (bound from the host), the
//!   box's own pty instance and shared memory;
//! * a layer path overlayfs would misread is refused before the first mount when every
//!   layer path is known then (see [`refuse_bad_layer_paths`]), and always before the
//!   overlay that would take it;
//! * nothing done below the box's root (or a rootless box's upper directory) follows a
//!   symlink: the root is confined ([`Kernel::confine`]) before anything is made or mounted
//!   below it, as PID 1 acts there with the host's privileges on a tree the box controls;
//! * the root overlay names its layers relative to the scratch directory, where they are
//!   staged: the box reads its options in `/proc/self/mountinfo`;
//! * a bind lands below the box's `/run`, a hidden path below the base or the box's root:
//!   anything else (`..`, a relative path) is refused;
//! * a hidden path below a shown one stays hidden (see [`show`]);
//! * `pivot_root` comes last: after it only the host's old root is detached.

#![deny(unsafe_code)]

use super::kernel::{Kernel, Kind};
use super::*;

mod names;
mod show;

use names::*;

/// Device nodes bound from the host into the box's private `/dev`.
pub(super) const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

pub(super) fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

pub(super) fn mount(
    k: &mut dyn Kernel,
    src: &str,
    target: &Path,
    fstype: &str,
    flags: MountFlags,
    data: &str,
) -> Result<(), String> {
    let data = CString::new(data).map_err(|e| err("mount options", e))?;
    k.mount(src, target, fstype, flags, data.as_c_str())
        .map_err(|e| {
            err(
                format!(
                    "mounting {fstype} at {} ({})",
                    target.display(),
                    data.to_string_lossy()
                ),
                e,
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

pub(super) fn mkdir_p(k: &mut dyn Kernel, p: &Path) -> Result<(), String> {
    k.mkdir_p(p)
        .map_err(|e| err(format!("creating {}", p.display()), e))
}

/// Refuse a layer path overlayfs would misread (see [`path_str`]) before the first mount of
/// the box, rather than at the overlay that takes it. `paths` come in the order the
/// overlays' options name them, so the refusal is the one that overlay's check would give.
pub(super) fn refuse_bad_layer_paths<'a>(
    paths: impl IntoIterator<Item = &'a PathBuf>,
) -> Result<(), String> {
    paths.into_iter().try_for_each(|p| path_str(p).map(drop))
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
pub(super) fn private_scratch(k: &mut dyn Kernel, spec: &BoxSpec) -> Result<PathBuf, String> {
    k.set_propagation(
        Path::new("/"),
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| err("making mounts private", e))?;
    mkdir_p(k, &spec.scratch)?;
    mount(
        k,
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
pub(super) fn enter_root(k: &mut dyn Kernel, root: &Path, spec: &BoxSpec) -> Result<(), String> {
    k.set_hostname(&spec.hostname)
        .map_err(|e| err("setting the host name", e))?;
    if spec.network.own_namespace() {
        k.loopback_up()?;
    }
    k.chdir(root).map_err(|e| err("chdir to the new root", e))?;
    k.pivot_root(Path::new("."), Path::new("."))
        .map_err(|e| err("pivot_root", e))?;
    k.unmount(Path::new("."), UnmountFlags::DETACH)
        .map_err(|e| err("detaching the host's root", e))?;
    k.chdir(Path::new("/")).map_err(|e| err("chdir /", e))?;
    Ok(())
}

/// Build the box's root and pivot into it. With `userns`, every layer is reached through an
/// idmapped mount and the files are made as box root (see [`crate::idmap`]); returns
/// whether that was done — a base whose file system cannot be idmapped (an overlayfs `/`,
/// when agentbox itself runs in a container) leaves box root as host root, said in the
/// supervisor's log, with the rest of the hardening unchanged.
pub(super) fn setup_root(
    k: &mut dyn Kernel,
    spec: &BoxSpec,
    userns: Option<&crate::idmap::BoxUserNs>,
) -> Result<bool, String> {
    let s = &spec.scratch;
    let (empty, base, root) = (s.join("e"), s.join("b"), s.join("r"));
    if userns.is_none() {
        // Every layer path the two overlays take is known now (with a user namespace,
        // which ones depends on whether the base can be idmapped; they are checked as the
        // overlays' options are made).
        refuse_bad_layer_paths([&empty, &spec.base].into_iter().chain(&spec.lowers).chain([
            &base,
            &spec.upper,
            &spec.workdir,
        ]))?;
    }
    let scratch = &private_scratch(k, spec)?;
    for d in [&empty, &base, &root] {
        mkdir_p(k, d)?;
    }
    // Everything below the root is the box's to shape (its layers, the directories bound
    // into it): nothing done there as host root may follow a symlink.
    k.confine(&root);
    hide_dirs(k, &empty, &spec.base, &spec.hide)?;
    let mut redirected = false;
    for s in show::plan(&spec.hide, &spec.show, &|_| false) {
        redirected |= show::redirect(k, &empty, &spec.base, &s)?;
    }
    let mapped = match userns {
        Some(ns) => {
            let (me, mb) = (scratch.join("m/e"), scratch.join("m/b"));
            mkdir_p(k, &me)?;
            mkdir_p(k, &mb)?;
            match k
                .idmapped_mount(ns, &empty, &me)
                .and_then(|()| k.idmapped_mount(ns, &spec.base, &mb))
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
    // directories that hide host paths, and the redirects that show some below them again
    // (followed, never made: the overlay is read-only).
    mount(
        k,
        "agentbox",
        &base,
        "overlay",
        MountFlags::RDONLY,
        &format!(
            "lowerdir={}:{}{}",
            path_str(&lower_empty)?,
            path_str(&lower_base)?,
            if redirected {
                ",redirect_dir=follow"
            } else {
                ""
            }
        ),
    )?;
    let ns = mapped.as_ref().map(|(ns, ..)| *ns);
    if let Some(ns) = ns {
        k.act_on_files_as_box_root(ns)?;
    }
    mount_box_root(
        k,
        spec,
        &root,
        Some(&base),
        ns.map(|ns| (ns, scratch.as_path())),
    )?;
    let resolv = k.read_file(Path::new("/etc/resolv.conf")).ok();
    special_mounts(k, &root, spec, ns)?;
    if spec.network == Network::Private {
        private_resolv_conf(k, scratch, &root, resolv.as_deref(), &spec.binds)?;
        if spec.base != Path::new("/") {
            share_host_file(k, scratch, &root, "etc/hosts")?;
        }
    } else if spec.base != Path::new("/") && spec.network == Network::Host {
        // An image's own name-service files describe some other machine's network.
        for file in ["etc/resolv.conf", "etc/hosts"] {
            share_host_file(k, scratch, &root, file)?;
        }
    } else if let Some(content) = resolv {
        provide_resolv_conf(k, &root, &content, &spec.binds)?;
    }
    enter_root(k, &root, spec)?;
    Ok(ns.is_some())
}

/// Mount the box's root overlay at `root`: its layers (over `base`, when given) with its
/// working upper directory. A rootless box's overlay is an unprivileged one (`userxattr`,
/// which keeps redirects and metacopy off itself and refuses them as options). Each layer
/// and the upper directory's parent are mounted below the scratch directory (with
/// `mapped`, idmapped, and the overlay is mounted as box root, see [`crate::idmap`]; else
/// plain binds), and the overlay names them relative to it (`m/0`, `m/u/upper`): the
/// options are what the box reads in `/proc/self/mountinfo`, and the store's paths (the
/// home's) are none of its business.
pub(super) fn mount_box_root(
    k: &mut dyn Kernel,
    spec: &BoxSpec,
    root: &Path,
    base: Option<&Path>,
    mapped: Option<(&crate::idmap::BoxUserNs, &Path)>,
) -> Result<(), String> {
    let scratch = &spec.scratch;
    let ns = mapped.map(|(ns, _)| ns);
    let stage = |k: &mut dyn Kernel, src: &Path, at: &Path| -> Result<(), String> {
        mkdir_p(k, at)?;
        match ns {
            Some(ns) => k.idmapped_mount(ns, src, at),
            None => k
                .bind(src, at)
                .map_err(|e| err(format!("binding {}", src.display()), e)),
        }
    };
    let mut lowers = Vec::new();
    for (i, l) in spec.lowers.iter().enumerate() {
        let at = scratch.join(format!("m/{i}"));
        stage(k, l, &at)?;
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
    stage(k, parent, &at)?;
    let (upper, workdir) = (at.join(u), at.join(w));
    if let Some(b) = base {
        lowers.push(b.to_owned());
    }
    // Relative to the scratch directory, the overlay's working directory when it resolves
    // them (a base outside it, `/`, says nothing).
    let named = |p: &Path| {
        p.strip_prefix(scratch)
            .map_or_else(|_| p.to_owned(), Path::to_owned)
    };
    let (lowers, upper, workdir) = (
        lowers.iter().map(|l| named(l)).collect::<Vec<_>>(),
        named(&upper),
        named(&workdir),
    );
    let lowers = lowers
        .iter()
        .map(|l| path_str(l))
        .collect::<Result<Vec<_>, _>>()?;
    k.chdir(scratch)
        .map_err(|e| err(format!("chdir to {}", scratch.display()), e))?;
    let mode = if spec.rootless {
        "userxattr"
    } else {
        "redirect_dir=off,metacopy=off"
    };
    // `nodev`: a device node in the box's layer (a bundle's, or one made before the box
    // lost CAP_MKNOD) can never be opened as a device.
    mount(
        k,
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
pub(super) fn setup_root_rootless(k: &mut dyn Kernel, spec: &BoxSpec) -> Result<(), String> {
    refuse_bad_layer_paths(spec.lowers.iter().chain([&spec.upper, &spec.workdir]))?;
    let scratch = &private_scratch(k, spec)?;
    let root = scratch.join("r");
    mkdir_p(k, &root)?;
    // The box's tree and its upper directory are the box's to shape: nothing done there
    // as the host user may follow a symlink.
    k.confine(&root);
    k.confine(&spec.upper);
    // Before the overlay: what the shown paths need in the box's upper directory is made
    // while nothing else uses it.
    let shows = show::prepare_rootless(k, spec, scratch)?;
    mount_box_root(k, spec, &root, None, None)?;
    let entries = k
        .read_dir(Path::new("/"))
        .map_err(|e| err("reading /", e))?;
    for entry in entries {
        let Some(n) = entry.name.to_str() else {
            continue;
        };
        let host = Path::new("/").join(n);
        let target = root.join(n);
        if NOT_BOUND.contains(&n) || entry.kind != Kind::Dir {
            continue;
        }
        // Only where the layer has the mount point: nothing is written to make one.
        if !k.lstat(&target).is_ok_and(|m| m.kind == Kind::Dir) {
            continue;
        }
        k.rbind(&host, &target)
            .map_err(|e| err(format!("binding {}", host.display()), e))?;
        // Read-only where the kernel lets us change it (a mount locked read-write stays so;
        // the user could write there on the host anyway).
        let _ = k.remount(&target, MountFlags::BIND | MountFlags::RDONLY);
    }
    let mut writable = Vec::new();
    for h in &spec.hide {
        // Where the host's directories, bound at their own paths, have it: the hiding mount
        // is made there without following a symlink (see `Kernel::confine`).
        // A path that is not plain is refused as it is written.
        under(&root, h)?;
        let real = host_real_path(k, h);
        let inside = under(&root, &real)?;
        // Below a directory the box does not take from the host (its own `/home`, a fresh
        // `/tmp`), nothing of the host's is there to hide.
        let top = real
            .components()
            .nth(1)
            .and_then(|c| c.as_os_str().to_str());
        if top.is_some_and(|t| NOT_BOUND.contains(&t)) {
            continue;
        }
        if real.parent().is_some() && k.stat(&inside).is_ok_and(|m| m.kind == Kind::Dir) {
            // Written once more, to make the mount points of the paths shown below it; read-only
            // before the box starts (see `show::mount_rootless`).
            let shown_below = shows
                .iter()
                .any(|s| !s.own && s.path.starts_with(h) && s.path != *h);
            mount(
                k,
                "agentbox",
                &inside,
                "tmpfs",
                if shown_below {
                    MountFlags::empty()
                } else {
                    MountFlags::RDONLY
                },
                "size=4k",
            )?;
            if shown_below {
                writable.push(inside);
            }
        }
    }
    show::mount_rootless(k, &root, &shows, &writable)?;
    let resolv = k.read_file(Path::new("/etc/resolv.conf")).ok();
    special_mounts(k, &root, spec, None)?;
    if spec.network == Network::Private {
        private_resolv_conf(k, scratch, &root, resolv.as_deref(), &spec.binds)?;
    }
    enter_root(k, &root, spec)
}

/// `path` with the host's symlinks on the way resolved (the host's own, which no box can
/// change), by name: where a rootless box, which sees the host's directories at their own
/// paths, has it. A path that loops, or that has no plain absolute spelling, is returned as
/// given (a hiding mount there then fails rather than lands elsewhere).
pub(super) fn host_real_path(k: &dyn Kernel, path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    // Still to walk, last first.
    let mut rest: Vec<PathBuf> = path
        .components()
        .rev()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut hops = 0;
    while let Some(c) = rest.pop() {
        match c.components().next() {
            Some(Component::RootDir) => out = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::Normal(n)) => {
                let next = out.join(n);
                match k.read_link(&next) {
                    Ok(to) => {
                        hops += 1;
                        if hops > 40 {
                            return path.to_owned();
                        }
                        rest.extend(to.components().rev().map(|c| PathBuf::from(c.as_os_str())));
                    }
                    Err(_) => out = next,
                }
            }
            Some(Component::CurDir | Component::Prefix(_)) | None => {}
        }
    }
    out
}

/// The skeleton a rootless box's first layer needs, made in `dir`: an empty directory for
/// every top-level directory of the host (mount points for the host's directories and for
/// `/proc`, `/dev`, …) and the host's top-level symlinks (`/bin -> usr/bin`). The host's side
/// makes it with the layer, outside any box's namespaces: no part of the box's mount plan,
/// it works on the files directly rather than through the kernel seam.
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
pub(super) fn hide_dirs(
    k: &mut dyn Kernel,
    empty: &Path,
    base: &Path,
    hide: &[PathBuf],
) -> Result<(), String> {
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
        let Ok(md) = k.stat(&host) else {
            continue;
        };
        done.push(h);
        if h.parent().is_none() {
            continue;
        }
        // The directories above it, with the host's owner and mode (the overlay now shows
        // this layer's attributes for them).
        show::make_parents(k, empty, base, h)?;
        let inside = under(empty, h)?;
        let hidden = if md.kind == Kind::Dir {
            // An empty, opaque directory: the base's content is not looked at.
            mkdir_p(k, &inside)?;
            copy_owner_mode(k, &host, &inside);
            k.set_xattr(&inside, "trusted.overlay.opaque", b"y")
        } else {
            // A whiteout: the file is not there at all.
            k.whiteout(&inside)
        };
        hidden.map_err(|e| err(format!("hiding {}", h.display()), e))?;
    }
    Ok(())
}

/// Give `to` the owner and permission bits of `from`, as far as the kernel lets us: a hiding
/// directory that fails to look like the host's is still empty.
pub(super) fn copy_owner_mode(k: &mut dyn Kernel, from: &Path, to: &Path) {
    if let Ok(m) = k.stat(from) {
        let _ = k.chown(to, m.uid, m.gid);
        let _ = k.chmod(to, m.mode & 0o7777);
    }
}

/// `/proc`, `/sys`, a minimal `/dev`, private `/tmp` and `/run`, and the binds.
pub(super) fn special_mounts(
    k: &mut dyn Kernel,
    root: &Path,
    spec: &BoxSpec,
    ns: Option<&crate::idmap::BoxUserNs>,
) -> Result<(), String> {
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV;
    let proc_ = root.join("proc");
    mkdir_p(k, &proc_)?;
    mount(k, "proc", &proc_, "proc", nosuid | MountFlags::NOEXEC, "")?;
    protect_proc(k, &proc_)?;
    let sys = root.join("sys");
    mkdir_p(k, &sys)?;
    if spec.rootless && spec.network == Network::Host {
        // A fresh sysfs needs a network namespace of our own: show the host's, read-only.
        k.rbind(Path::new("/sys"), &sys)
            .map_err(|e| err("binding /sys", e))?;
        let _ = k.remount(&sys, MountFlags::BIND | MountFlags::RDONLY);
    } else {
        mount(
            k,
            "sysfs",
            &sys,
            "sysfs",
            nosuid | MountFlags::NOEXEC | MountFlags::RDONLY,
            "",
        )?;
    }
    // As Docker's `MaskedPaths`: the firmware's tables, and the host's energy counters
    // (RAPL, a side channel on what else the machine computes).
    for masked in SYS_MASKED_DIRS {
        mask_dir(k, &sys.join(masked))?;
    }
    let dev = root.join("dev");
    mkdir_p(k, &dev)?;
    // `nodev` too: the device nodes below are bind mounts of the host's, which keep their
    // own mount's flags; nothing else in the box's /dev can be opened as a device.
    mount(
        k,
        "agentbox",
        &dev,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NOEXEC | MountFlags::NODEV,
        "mode=755,size=1m",
    )?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        let inside = dev.join(name);
        k.create_file(&inside)
            .map_err(|e| err(format!("creating {}", inside.display()), e))?;
        k.bind(&host, &inside)
            .map_err(|e| err(format!("binding {}", host.display()), e))?;
    }
    let pts = dev.join("pts");
    mkdir_p(k, &pts)?;
    mount(
        k,
        "devpts",
        &pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "newinstance,ptmxmode=0666,mode=620",
    )?;
    let shm = dev.join("shm");
    mkdir_p(k, &shm)?;
    let sizes = spec.tmpfs;
    let sized = |mode: &str, bytes: u64| format!("mode={mode}{}", TmpfsSizes::option(bytes));
    mount(k, "shm", &shm, "tmpfs", nosuid, &sized("1777", sizes.shm))?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        k.symlink(Path::new(target), &dev.join(link))
            .map_err(|e| err(format!("creating /dev/{link}"), e))?;
    }
    let tmp = root.join("tmp");
    mkdir_p(k, &tmp)?;
    mount(k, "tmp", &tmp, "tmpfs", nosuid, &sized("1777", sizes.tmp))?;
    let run = root.join("run");
    mkdir_p(k, &run)?;
    mount(k, "run", &run, "tmpfs", nosuid, &sized("755", sizes.run))?;
    for b in &spec.binds {
        bind(k, root, b, ns)?;
    }
    Ok(())
}

/// Directories of `/sys` masked by an empty read-only directory.
pub(super) const SYS_MASKED_DIRS: &[&str] = &["firmware", "devices/virtual/powercap"];

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
pub(super) fn protect_proc(k: &mut dyn Kernel, proc_: &Path) -> Result<(), String> {
    for name in PROC_READ_ONLY {
        let p = proc_.join(name);
        if k.stat(&p).is_err() {
            continue;
        }
        k.bind(&p, &p)
            .map_err(|e| err(format!("binding /proc/{name}"), e))?;
        k.remount(
            &p,
            MountFlags::BIND
                | MountFlags::RDONLY
                | MountFlags::NOSUID
                | MountFlags::NODEV
                | MountFlags::NOEXEC,
        )
        .map_err(|e| err(format!("making /proc/{name} read-only"), e))?;
    }
    for name in PROC_MASKED_FILES {
        let p = proc_.join(name);
        if k.stat(&p).is_ok() {
            k.bind(Path::new("/dev/null"), &p)
                .map_err(|e| err(format!("masking /proc/{name}"), e))?;
        }
    }
    for name in PROC_MASKED_DIRS {
        mask_dir(k, &proc_.join(name))?;
    }
    Ok(())
}

/// Hide directory `p` (when it exists) under an empty read-only tmpfs.
pub(super) fn mask_dir(k: &mut dyn Kernel, p: &Path) -> Result<(), String> {
    if !k.stat(p).is_ok_and(|m| m.kind == Kind::Dir) {
        return Ok(());
    }
    mount(
        k,
        "agentbox-masked",
        p,
        "tmpfs",
        MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        "size=0,mode=555",
    )
}

/// Bind host path `b.src` at `b.dst` below `/run` in the box, always `nosuid,nodev`. A
/// read-only bind is, with `ns`, idmapped where its file system allows (so the host's
/// root-owned files are box root's), else a plain bind (host root's files are then owned by
/// nobody in the box, readable as their modes say). A read-write bind is never idmapped: what
/// the box writes there is owned on the host by the box's own (unprivileged) ids, never by
/// host root.
pub(super) fn bind(
    k: &mut dyn Kernel,
    root: &Path,
    b: &Bind,
    ns: Option<&crate::idmap::BoxUserNs>,
) -> Result<(), String> {
    if !b.dst.starts_with("/run/") {
        return Err(format!("bind target {} is not below /run", b.dst.display()));
    }
    let target = under(root, &b.dst)?;
    let is_dir = k
        .stat(&b.src)
        .map_err(|e| err(format!("bind source {}", b.src.display()), e))?
        .kind
        == Kind::Dir;
    if let Some(parent) = target.parent() {
        mkdir_p(k, parent)?;
    }
    if is_dir {
        mkdir_p(k, &target)?;
    } else {
        k.create_file(&target)
            .map_err(|e| err(format!("creating {}", target.display()), e))?;
    }
    let ns = ns.filter(|_| b.readonly);
    if ns.is_none_or(|ns| k.idmapped_mount(ns, &b.src, &target).is_err()) {
        k.bind(&b.src, &target)
            .map_err(|e| err(format!("binding {}", b.src.display()), e))?;
    }
    let flags = MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV;
    if b.readonly {
        k.remount(&target, flags | MountFlags::RDONLY)
            .map_err(|e| err(format!("making {} read-only", b.dst.display()), e))?;
    } else {
        k.remount(&target, flags)
            .map_err(|e| err(format!("making {} nosuid", b.dst.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod confined_tests;
#[cfg(test)]
mod show_tests;
#[cfg(test)]
mod tests;
