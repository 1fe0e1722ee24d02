//! The box's name-service files, `/etc/resolv.conf` and `/etc/hosts`: the host's (or the
//! private network's) content shown in the box without writing to its layer.
//!
//! Invariants:
//! * content is written only in PID 1's scratch tmpfs or in the box's own `/run` tmpfs,
//!   never in the box's layer nor below a directory bound into the box (the shared agent
//!   copy is one: the box fills it with whatever symlinks it likes);
//! * where the content goes is decided lexically, never by following the box's symlinks,
//!   and every change in the box's tree is made through the confined kernel (see
//!   [`Kernel::confine`]): a symlink the box planted on the way fails the step, it never
//!   leads PID 1 — host root, before `pivot_root` — to a host file.

use super::*;

/// Show the host's `/<file>` at the same place in the box (a bind of a private copy, so the
/// box can neither change the host's file nor see later host edits).
pub(in crate::init) fn share_host_file(
    k: &mut dyn Kernel,
    scratch: &Path,
    root: &Path,
    file: &str,
) -> Result<(), String> {
    let Ok(content) = k.read_file(&Path::new("/").join(file)) else {
        return Ok(());
    };
    bind_content(k, scratch, root, file, &content)
}

/// Where the box's `/etc/resolv.conf` symlink points, as an absolute path in the box worked
/// out by name (`../run/…` is the usual spelling), when that is in the box's own `/run`
/// tmpfs: below `/run/` and below none of the `binds`' targets. `None` when `/etc/resolv.conf`
/// is no symlink or points elsewhere.
pub(in crate::init) fn resolver_in_own_run(
    k: &dyn Kernel,
    root: &Path,
    binds: &[Bind],
) -> Option<PathBuf> {
    let target = k.read_link(&root.join("etc/resolv.conf")).ok()?;
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
    let own = abs.starts_with("/run/") && !binds.iter().any(|b| abs.starts_with(&b.dst));
    own.then_some(abs)
}

/// Write `content` at `abs` (see [`resolver_in_own_run`]) in the box's `/run`.
fn write_in_run(k: &mut dyn Kernel, root: &Path, abs: &Path, content: &[u8]) -> Result<(), String> {
    let inside = under(root, abs)?;
    if let Some(parent) = inside.parent() {
        mkdir_p(k, parent)?;
    }
    k.write_file(&inside, content)
        .map_err(|e| err(format!("writing {}", inside.display()), e))
}

/// The private network's `/etc/resolv.conf` (see [`crate::net::resolv_conf`]). Where the
/// base's file is a symlink into the box's own `/run` (systemd-resolved), the content goes
/// at its target there, so the box's layer is not touched; otherwise a bind of a private
/// copy covers the file.
pub(in crate::init) fn private_resolv_conf(
    k: &mut dyn Kernel,
    scratch: &Path,
    root: &Path,
    host: Option<&[u8]>,
    binds: &[Bind],
) -> Result<(), String> {
    let content =
        crate::net::resolv_conf(&String::from_utf8_lossy(host.unwrap_or_default())).into_bytes();
    match resolver_in_own_run(k, root, binds) {
        Some(abs) => write_in_run(k, root, &abs, &content),
        None => bind_content(k, scratch, root, "etc/resolv.conf", &content),
    }
}

/// Show `content` at `/<file>` in the box: a bind of a copy in the scratch tmpfs (which the
/// box may change: the copy is its own, in memory; the layer's file stays as it was). A
/// symlink there is replaced by an empty file to bind on (the symlink is the box's: removing
/// it follows nothing).
pub(in crate::init) fn bind_content(
    k: &mut dyn Kernel,
    scratch: &Path,
    root: &Path,
    file: &str,
    content: &[u8],
) -> Result<(), String> {
    let copy = scratch.join(file.replace('/', "_"));
    k.write_file(&copy, content)
        .map_err(|e| err(format!("writing {}", copy.display()), e))?;
    let target = root.join(file);
    let kind = k.lstat(&target).map(|m| m.kind).ok();
    if kind == Some(Kind::Symlink) {
        k.remove_file(&target)
            .map_err(|e| err(format!("replacing /{file}"), e))?;
    }
    if kind.is_none() || kind == Some(Kind::Symlink) {
        if let Some(parent) = target.parent() {
            mkdir_p(k, parent)?;
        }
        k.create_file(&target)
            .map_err(|e| err(format!("creating /{file}"), e))?;
    }
    k.bind(&copy, &target)
        .map_err(|e| err(format!("binding /{file}"), e))
}

/// `/etc/resolv.conf` is often a symlink into `/run` (systemd-resolved), which is private in
/// the box: recreate its target there with the host's content. Anything else (a file of the
/// base's, a symlink elsewhere or into a directory bound into the box) is left as it is.
pub(in crate::init) fn provide_resolv_conf(
    k: &mut dyn Kernel,
    root: &Path,
    content: &[u8],
    binds: &[Bind],
) -> Result<(), String> {
    match resolver_in_own_run(k, root, binds) {
        Some(abs) => write_in_run(k, root, &abs, content),
        None => Ok(()),
    }
}
