//! Host paths shown again below hidden ones ([`BoxSpec::show`]: the host user's toolchains
//! and package caches), copy-on-write: the box reads the host's files and its writes go to
//! its own layer, versioned like any other.
//!
//! * A root box's base is an overlay whose top layer hides paths with opaque directories
//!   ([`super::hide_dirs`]). A shown path is a directory of that layer with an absolute
//!   overlayfs redirect to its own path: the lookup goes down to the host's directory
//!   although a directory above it is opaque ([`redirect`]). The box's overlay takes the
//!   base as its lowest layer, so a write copies the file up into the box's layer.
//! * A rootless box cannot use redirects (an unprivileged overlay refuses them) and binds
//!   the host's directories read-only. A shown path gets an overlay of its own mounted at
//!   it ([`mount_rootless`]): the host's directory at the bottom, the box's layers' copies
//!   of that path above it, and the box's upper directory's copy as its upper directory —
//!   so what the box writes there is in its layer, where the next node takes it.
//! * Hidden paths below a shown one (credentials: `~/.cargo/credentials.toml`) are
//!   whiteouts in a layer above the host's directory, whether the host has them or not (a
//!   secret made later stays hidden): they do not exist in the box ([`hide_below`]).

use super::*;

/// Where a rootless box's hidden paths below a shown one are made (below its scratch).
const HIDE_LAYERS: &str = "s";

/// A shown path that takes effect, with the hidden paths below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    pub path: PathBuf,
    /// Hidden paths below `path` (none below another of them).
    pub hidden: Vec<PathBuf>,
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

/// Which of `show` take effect given `hide`, each with the hidden paths below it. A path
/// is as the nearest path above it says (a hidden one or a shown one that takes effect); a
/// path both hidden and shown is hidden. So a shown path takes effect when the nearest path
/// above it is hidden — or, with none, when `own` says the box does not see the host's
/// files there (a rootless box's own `/root` and `/home`).
pub(crate) fn plan(hide: &[PathBuf], show: &[PathBuf], own: &dyn Fn(&Path) -> bool) -> Vec<Shown> {
    let mut shows: Vec<&PathBuf> = show.iter().collect();
    shows.sort();
    shows.dedup();
    let mut out: Vec<Shown> = Vec::new();
    for s in shows {
        if hide.contains(s) {
            continue;
        }
        let hidden_above = hide
            .iter()
            .filter(|h| s.starts_with(h) && *h != s)
            .map(|h| depth(h))
            .max();
        let shown_above = out
            .iter()
            .filter(|o| s.starts_with(&o.path))
            .map(|o| depth(&o.path))
            .max();
        let takes_effect = match (hidden_above, shown_above) {
            (Some(h), Some(o)) => h > o,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => own(s),
        };
        if takes_effect {
            out.push(Shown {
                path: s.clone(),
                hidden: Vec::new(),
            });
        }
    }
    for h in hide {
        let Some(i) = (0..out.len())
            .filter(|&i| h.starts_with(&out[i].path) && *h != out[i].path)
            .max_by_key(|&i| depth(&out[i].path))
        else {
            continue;
        };
        let s = out[i].path.clone();
        // Below another hidden path below the same shown one: hidden with it.
        if hide
            .iter()
            .any(|x| x != h && h.starts_with(x) && x.starts_with(&s) && *x != s)
        {
            continue;
        }
        if !out[i].hidden.contains(h) {
            out[i].hidden.push(h.clone());
        }
    }
    for s in &mut out {
        s.hidden.sort();
    }
    out
}

/// Show `s.path` of the base in the base's top layer `empty` (root boxes): a directory
/// redirecting to the base's own (with the host's owner and mode, and the directories
/// above it as the host's), or a copy of the host's symlink. A regular file is not shown
/// (overlayfs redirects only directories), nor a path the host no longer has. Returns
/// whether a redirect was made (the base's overlay must then follow redirects).
pub(crate) fn redirect(
    k: &mut dyn Kernel,
    empty: &Path,
    base: &Path,
    s: &Shown,
) -> Result<bool, String> {
    let host = under(base, &s.path)?;
    let Ok(md) = k.lstat(&host) else {
        return Ok(false);
    };
    if !matches!(md.kind, Kind::Dir | Kind::Symlink) {
        return Ok(false);
    }
    // The base's overlay sees the base's own file system only: a directory on another one
    // (a separate `/home` partition) is not below it, and a redirect would show an empty
    // directory.
    if md.kind == Kind::Dir && k.stat(base).is_ok_and(|b| b.dev != md.dev) {
        eprintln!(
            "{} is on another file system than {}: a root box does not show it",
            s.path.display(),
            base.display()
        );
        return Ok(false);
    }
    let inside = under(empty, &s.path)?;
    make_parents(k, empty, base, &s.path)?;
    if md.kind == Kind::Symlink {
        let to = k
            .read_link(&host)
            .map_err(|e| err(format!("reading {}", host.display()), e))?;
        k.symlink(&to, &inside)
            .map_err(|e| err(format!("showing {}", s.path.display()), e))?;
        return Ok(false);
    }
    mkdir_p(k, &inside)?;
    copy_owner_mode(k, &host, &inside);
    // Absolute: looked up from the root of the layers below, whatever hides its parents.
    k.set_xattr(
        &inside,
        "trusted.overlay.redirect",
        s.path.as_os_str().as_encoded_bytes(),
    )
    .map_err(|e| err(format!("showing {}", s.path.display()), e))?;
    for h in &s.hidden {
        hide_below(k, &inside, &host, &s.path, h)?;
    }
    Ok(true)
}

/// The directories above `path` in the hiding layer `layer`, with the owner and mode of
/// the base's (`base`) where it has them.
pub(crate) fn make_parents(
    k: &mut dyn Kernel,
    layer: &Path,
    base: &Path,
    path: &Path,
) -> Result<(), String> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    let mut host_dir = base.to_owned();
    let mut dir = layer.to_owned();
    for c in parent.components().skip(1) {
        host_dir.push(c);
        dir.push(c);
        if k.stat(&dir).is_ok() {
            continue;
        }
        mkdir_p(k, &dir)?;
        copy_owner_mode(k, &host_dir, &dir);
    }
    Ok(())
}

/// Hide `hidden` (below the shown path `shown`) in `layer`, the layer above the host's copy
/// of `shown` (at `host`): a whiteout at it, or at the first directory on the way the host
/// does not have or that is not a directory there (a symlink could lead the box's lookup
/// to the hidden path's name elsewhere). The directories on the way are the host's (owner
/// and mode).
pub(crate) fn hide_below(
    k: &mut dyn Kernel,
    layer: &Path,
    host: &Path,
    shown: &Path,
    hidden: &Path,
) -> Result<(), String> {
    let rel = hidden
        .strip_prefix(shown)
        .map_err(|_| format!("{} is not below {}", hidden.display(), shown.display()))?;
    let parts: Vec<Component> = rel.components().collect();
    let (mut host_at, mut at) = (host.to_owned(), layer.to_owned());
    for (i, c) in parts.iter().enumerate() {
        let Component::Normal(name) = c else {
            return Err(format!("{} is not a plain path", hidden.display()));
        };
        host_at.push(name);
        at.push(name);
        let last = i + 1 == parts.len();
        match k.lstat(&host_at) {
            Ok(m) if !last && m.kind == Kind::Dir => {
                if k.lstat(&at).is_err() {
                    mkdir_p(k, &at)?;
                    copy_owner_mode(k, &host_at, &at);
                }
            }
            _ => {
                // Already hidden with another path below the same directory.
                if k.lstat(&at).is_ok_and(|m| m.kind != Kind::Dir) {
                    return Ok(());
                }
                return k
                    .whiteout(&at)
                    .map_err(|e| err(format!("hiding {}", hidden.display()), e));
            }
        }
    }
    Ok(())
}

/// A shown path of a rootless box, ready to be mounted once the box's root is.
#[derive(Debug)]
pub(crate) struct RootlessShow {
    pub path: PathBuf,
    /// The overlay's options.
    pub data: String,
    /// In the box's own `/root` or `/home` (its layer holds the mount point), rather than
    /// below a hidden host directory (an empty tmpfs, where it is made).
    pub own: bool,
}

/// Directories a rootless box takes from its own layer, where a shown path's mount point
/// is the layer's: the host's are never bound there.
const OWN: &[&str] = &["root", "home"];

/// Whether `p` is in a rootless box's own `/root` or `/home`.
pub(crate) fn in_own_dirs(p: &Path) -> bool {
    p.components()
        .nth(1)
        .and_then(|c| c.as_os_str().to_str())
        .is_some_and(|top| OWN.contains(&top))
}

/// The overlay options of a rootless box's shown paths, and what they need made before the
/// box's overlay is mounted (its upper directory is not written to while it is): each
/// path's copy in the upper directory, a work directory next to the box's, and the layer of
/// whiteouts hiding what is hidden below it. A path the box cannot show is left out, with
/// the reason in the supervisor's log: a file or symlink (only directories can be
/// overlays), one below a directory the box mounts fresh (`/tmp`), one the box's layer
/// replaced by a file, one whose paths overlayfs would misread.
pub(crate) fn prepare_rootless(
    k: &mut dyn Kernel,
    spec: &BoxSpec,
    scratch: &Path,
) -> Result<Vec<RootlessShow>, String> {
    let own = |p: &Path| in_own_dirs(p);
    let mut out = Vec::new();
    for (i, s) in plan(&spec.hide, &spec.show, &own).into_iter().enumerate() {
        let top = s
            .path
            .components()
            .nth(1)
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .to_owned();
        let is_own = OWN.contains(&top.as_str());
        if !is_own && NOT_BOUND.contains(&top.as_str()) {
            continue;
        }
        if !k.lstat(&s.path).is_ok_and(|m| m.kind == Kind::Dir) {
            continue;
        }
        match prepare_one(k, spec, scratch, i, &s) {
            Ok(Some(data)) => out.push(RootlessShow {
                path: s.path.clone(),
                data,
                own: is_own,
            }),
            Ok(None) => {}
            Err(e) => eprintln!("{} is not shown in the box: {e}", s.path.display()),
        }
    }
    Ok(out)
}

/// What the box's layer holds at `path`, seen from the top: whether `layer` has it as a
/// directory, and whether the layers below are seen there (no opaque directory on the way)
/// — `None` when a whiteout or a non-directory on the way hides it and everything below.
fn layer_at(k: &dyn Kernel, layer: &Path, path: &Path) -> Result<Option<(bool, bool)>, String> {
    let mut at = layer.to_owned();
    let mut below_seen = true;
    for c in path.components().skip(1) {
        at.push(c);
        match k.lstat(&at) {
            Err(_) => return Ok(Some((false, below_seen))),
            Ok(m) if m.kind == Kind::Dir => {
                let opaque = k
                    .get_xattr(&at, "user.overlay.opaque")
                    .map_err(|e| err(format!("reading {}", at.display()), e))?;
                if opaque.as_deref() == Some(b"y") {
                    below_seen = false;
                }
            }
            Ok(_) => return Ok(None),
        }
    }
    Ok(Some((true, below_seen)))
}

fn prepare_one(
    k: &mut dyn Kernel,
    spec: &BoxSpec,
    scratch: &Path,
    i: usize,
    s: &Shown,
) -> Result<Option<String>, String> {
    // The box's copies of the path, top first, down to the first layer that hides the
    // rest; then the host's.
    let Some((_, mut below_seen)) = layer_at(k, &spec.upper, &s.path)? else {
        // The box replaced the path or a directory above it: its tree says so.
        return Ok(None);
    };
    let mut lowers = Vec::new();
    for l in &spec.lowers {
        if !below_seen {
            break;
        }
        match layer_at(k, l, &s.path)? {
            None => below_seen = false,
            Some((has, seen)) => {
                if has {
                    lowers.push(under(l, &s.path)?);
                }
                below_seen = seen;
            }
        }
    }
    if below_seen && !s.hidden.is_empty() {
        let layer = scratch.join(HIDE_LAYERS).join(i.to_string());
        mkdir_p(k, &layer)?;
        for h in &s.hidden {
            hide_below(k, &layer, &s.path, &s.path, h)?;
        }
        lowers.push(layer);
    }
    if below_seen {
        lowers.push(s.path.clone());
    }
    // Its copy in the upper directory, the directories above it as the layer below shows
    // them (else as the host's): making them changes nothing the box sees.
    let upper = under(&spec.upper, &s.path)?;
    let mut at = spec.upper.clone();
    let mut rel = PathBuf::from("/");
    for c in s.path.components().skip(1) {
        at.push(c);
        rel.push(c);
        if k.lstat(&at).is_ok() {
            continue;
        }
        mkdir_p(k, &at)?;
        let model = spec
            .lowers
            .iter()
            .filter_map(|l| under(l, &rel).ok())
            .find(|p| k.lstat(p).is_ok_and(|m| m.kind == Kind::Dir))
            .unwrap_or_else(|| rel.clone());
        copy_owner_mode(k, &model, &at);
    }
    // On the upper directory's file system, as overlayfs requires; inside the box's work
    // directory, which only overlays use. The kernel logs that these directories are below
    // the box's overlay's upper and work directories ("in-use … undefined behavior"): the
    // box's overlay never reaches them, the shown path's mount covers its copy there.
    let work = spec.workdir.join(format!("show-{i}"));
    mkdir_p(k, &work)?;
    let lowers = lowers
        .iter()
        .map(|l| path_str(l))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(format!(
        "lowerdir={},upperdir={},workdir={},userxattr,index=off,xino=off",
        lowers.join(":"),
        path_str(&upper)?,
        path_str(&work)?
    )))
}

/// Mount a rootless box's shown paths in its root `root`: at the mount point its layer
/// holds, or one made in the empty tmpfs hiding the host directory above it (`writable`:
/// those tmpfs mounts, still writable; made read-only here once done). A mount that fails
/// leaves the path as it was, said in the supervisor's log; the tmpfs mounts' becoming
/// read-only must succeed.
pub(crate) fn mount_rootless(
    k: &mut dyn Kernel,
    root: &Path,
    shows: &[RootlessShow],
    writable: &[PathBuf],
) -> Result<(), String> {
    for s in shows {
        let target = under(root, &s.path)?;
        if !s.own {
            // No empty directory hides the host's there (it was not a directory in the
            // box): nowhere to make the mount point without writing to a host directory.
            if !writable.iter().any(|w| target.starts_with(w)) {
                continue;
            }
            if let Err(e) = mkdir_p(k, &target) {
                eprintln!("{} is not shown in the box: {e}", s.path.display());
                continue;
            }
        }
        if let Err(e) = mount(
            k,
            "agentbox",
            &target,
            "overlay",
            MountFlags::NODEV,
            &s.data,
        ) {
            eprintln!("{} is not shown in the box: {e}", s.path.display());
        }
    }
    for w in writable {
        k.remount(w, MountFlags::BIND | MountFlags::RDONLY)
            .map_err(|e| err(format!("making {} read-only", w.display()), e))?;
    }
    Ok(())
}
