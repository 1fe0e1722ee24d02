//! Editing a complete tree in place: applying an overlay-format layer onto it, or a
//! cleanup plan.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::backend::BoxBase;
use crate::bundle::fsutil;
use crate::fsops::copy::{copy_entry, CopyOpts};
use crate::fsops::scan::{read_meta, scan_tree};
use crate::fsops::Kind;
use crate::store::io_at;
use crate::{Error, Result};

/// Fold the overlay-format layers `layers` (top first, at least one) into one layer at `dst`
/// (which must not exist) that shows over any base what the stack shows over it
/// ([`crate::fsops::scan::fold_chain`]): folded in memory, then written once. With `base`
/// (the layers, top first, the new layer is to be mounted over), the whiteouts that hide
/// nothing of them are left out ([`idle_whiteout`]). Such a whiteout is not only useless:
/// in a directory that only this layer provides, overlayfs reads the directory straight
/// from the layer and lists the whiteout's name, which then cannot be opened. `opaque` and
/// `link_from` as for [`apply_overlay_layer`].
pub fn fold_over_base(
    layers: &[&Path],
    dst: &Path,
    opaque: &str,
    link_from: Option<&Path>,
    base: Option<&Below>,
) -> Result<()> {
    if layers.is_empty() {
        return Err(Error::Backend {
            path: dst.to_owned(),
            message: "a fold of no layers".into(),
        });
    }
    let mut tree = crate::fsops::scan::fold_chain(layers, opaque)?;
    if let Some(base) = base {
        let mut idle = Vec::new();
        for (rel, e) in &tree.entries {
            let opaque_at = |a: &Path| {
                tree.entries
                    .get(a)
                    .is_some_and(|d| crate::fsops::scan::is_opaque(&d.meta, opaque))
            };
            if e.meta.is_whiteout() && idle_whiteout(rel, &opaque_at, base, opaque)? {
                idle.push(rel.clone());
            }
        }
        for rel in idle {
            tree.entries.remove(&rel);
        }
    }
    // The folded layer is a diff layer like those it folds: their files are linked even
    // when they carry a copy-up's overlay attributes, which they did as lowers already.
    let opts = CopyOpts {
        reflink: true,
        link_from: link_from.map(Path::to_path_buf),
        link_marked: true,
        ..CopyOpts::default()
    };
    crate::fsops::copy::copy_tree(&tree, dst, &opts)?;
    Ok(())
}

/// After [`apply_overlay_tree`] of `tree` onto `target` (a box's layer, to be mounted over
/// `base`): remove from `target` the whiteouts `tree` put there that hide nothing
/// ([`idle_whiteout`]), giving their directories their mtimes back.
pub(crate) fn drop_idle_whiteouts(
    tree: &crate::fsops::Tree,
    target: &Path,
    base: &BoxBase,
    opaque: &str,
) -> Result<()> {
    let base = Below::new(Vec::new(), Some(base.clone()));
    let opaque_at = |a: &Path| {
        read_meta(&fsutil::join(target, a))
            .is_ok_and(|m| m.kind == Kind::Dir && crate::fsops::scan::is_opaque(&m, opaque))
    };
    for (rel, e) in &tree.entries {
        if !e.meta.is_whiteout() || !idle_whiteout(rel, &opaque_at, &base, opaque)? {
            continue;
        }
        let at = target.join(rel);
        let parent = fsutil::join(target, rel.parent().unwrap_or(Path::new("")));
        let before = read_meta(&parent)?;
        fsutil::remove_any(&at).map_err(|err| Error::Io(io_at(&at, err)))?;
        fsutil::set_mtime(&parent, before.mtime_sec, before.mtime_nsec)
            .map_err(|err| Error::Io(io_at(&parent, err)))?;
    }
    Ok(())
}

/// What a new layer is to be mounted over: layers (top first: a chain's lower layers, a
/// box's own layers below the new one), then, for a box, its base; and the mount points of
/// this namespace, which a lookup in them never enters.
pub struct Below {
    stack: Vec<PathBuf>,
    base: Option<BoxBase>,
    mounts: std::collections::HashSet<PathBuf>,
}

impl Below {
    pub fn new(stack: Vec<PathBuf>, base: Option<BoxBase>) -> Below {
        Below {
            stack,
            base,
            mounts: crate::mounts::mounts()
                .into_iter()
                .map(|m| m.mount_point)
                .collect(),
        }
    }
}

/// Whether a whiteout at `rel` of a layer to be mounted over `base` hides nothing and may
/// go: when a directory above it in the layer is opaque (`opaque_at` tells), or when the
/// merged `base` has no directory where the whiteout's directory is. The second rule is per
/// directory, not per path: a whiteout in a directory the base has is kept whether or not
/// the base has its name (that directory merges, so the name is never listed), so deciding
/// needs no lookup of the name itself.
pub(crate) fn idle_whiteout(
    rel: &Path,
    opaque_at: &dyn Fn(&Path) -> bool,
    base: &Below,
    opaque: &str,
) -> Result<bool> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    if parent
        .ancestors()
        .any(|a| !a.as_os_str().is_empty() && opaque_at(a))
    {
        return Ok(true);
    }
    Ok(!holds_dir(base, parent, opaque)?)
}

/// Whether the merged view of `below` has a directory at `rel`, resolved name by name as
/// overlayfs does (a symlink is never followed). The names come from a box: the lookup
/// never enters another mount, so a box's names cannot make the host mount, or wait on,
/// anything (an automounter's directory, a network filesystem). Overlayfs does not cross
/// mounts either: at a mount point of the host it sees the directory the mount covers,
/// which exists and is normally empty, so the answer there is yes for the mount point
/// itself and no below it, without a look.
///
/// The layers are asked first, then the base as the box sees it (a directory the layers
/// hide from the base is then still taken as there: a whiteout kept, never one dropped that
/// hides something).
fn holds_dir(below: &Below, rel: &Path, opaque: &str) -> Result<bool> {
    if !below.stack.is_empty() && lookup_dir(below, below.stack.clone(), rel, None, opaque)? {
        return Ok(true);
    }
    match &below.base {
        Some(b) => lookup_dir(below, vec![b.root.clone()], rel, Some(b), opaque),
        None => Ok(false),
    }
}

/// [`holds_dir`] in the layers `dirs` (top first), or in a box's base `view` (`dirs` its
/// root): below a hidden path only the directories leading to a shown one exist there,
/// and a hidden path itself is what the root has (an empty directory when a directory).
fn lookup_dir(
    below: &Below,
    mut dirs: Vec<PathBuf>,
    rel: &Path,
    view: Option<&BoxBase>,
    opaque: &str,
) -> Result<bool> {
    // Every root merges: overlayfs reads no `opaque` attribute on a layer's root.
    let mut at = PathBuf::from("/");
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        at.push(part);
        if let Some(v) = view {
            let shown = v.shown.iter().any(|s| at.starts_with(s));
            let below_hidden = v.hidden.iter().any(|h| at.starts_with(h) && at != *h);
            if below_hidden && !shown {
                if v.shown.iter().any(|s| s.starts_with(&at)) {
                    // Made on the way to a shown path.
                    dirs = dirs.iter().map(|d| d.join(part.as_os_str())).collect();
                    continue;
                }
                return Ok(false);
            }
        }
        if dirs
            .iter()
            .any(|d| below.mounts.contains(&d.join(part.as_os_str())))
        {
            return Ok(parts.peek().is_none());
        }
        match crate::fsops::scan::merged_child(&dirs, part.as_os_str(), opaque)? {
            Some((_, meta, next)) if meta.is_dir() => dirs = next,
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// Apply the overlay-format layer `diff` onto the tree `target`, keeping overlay markers as
/// they are (the target is itself a layer above some base): a whiteout replaces whatever is
/// at its path, a directory marked opaque replaces the directory there (its old content
/// goes), other directories merge, every other entry replaces what is there. A directory
/// merged into one marked opaque stays opaque, and one put where `target` has a
/// non-directory (a whiteout, a file) becomes opaque: in the stack, either of those ends the
/// merge there, so nothing of the base may show through it. Data is
/// reflinked where the filesystem can; metadata is exact; names of one inode in `diff` are
/// one inode in `target` (hard links stay links). Symlinks in `target` are never followed:
/// entries are replaced, not written through.
/// `opaque` is the store's opaque-directory attribute (`trusted.` or `user.overlay.opaque`).
/// `link_from`: see [`CopyOpts::link_from`] (the store's layer directory when `diff` is a
/// published layer).
pub fn apply_overlay_layer(
    diff: &Path,
    target: &Path,
    opaque: &str,
    link_from: Option<&Path>,
) -> Result<()> {
    apply_overlay_tree(&scan_tree(diff)?, target, opaque, link_from, None, None)
}

/// [`apply_overlay_layer`] of a layer known as a tree (its entries' `src` anywhere, its
/// whiteouts whiteout devices): what a commit planned straight from a box's upper
/// directory, without writing the layer out first. `beneath`: every source is opened below
/// it, never through a symlink (see [`CopyOpts::beneath`]). `kept`: regular files that
/// `target` already holds exactly as `tree` has them (prestaged in place, see
/// [`crate::backend::prestage`]), left as they are.
pub(crate) fn apply_overlay_tree(
    tree: &crate::fsops::Tree,
    target: &Path,
    opaque: &str,
    link_from: Option<&Path>,
    beneath: Option<&Path>,
    kept: Option<&std::collections::HashSet<PathBuf>>,
) -> Result<()> {
    let root = fsutil::is_root();
    let opts = CopyOpts {
        reflink: true,
        ignore_owner_errors: !root,
        xattr_filter: None,
        link_from: link_from.map(Path::to_path_buf),
        link_marked: false,
        beneath: beneath.map(Path::to_path_buf),
        prestaged: None,
    };
    let mut dirs: Vec<(PathBuf, std::borrow::Cow<'_, crate::fsops::Meta>)> = Vec::new();
    // First copy of each multiply-linked inode of the diff: (dev, ino) → its path in target.
    let mut links: std::collections::HashMap<(u64, u64), PathBuf> = Default::default();
    // Entries come parents first (sorted paths).
    for (rel, e) in &tree.entries {
        let t = target.join(rel);
        if rel.as_os_str().is_empty() {
            dirs.push((t, std::borrow::Cow::Borrowed(&e.meta)));
            continue;
        }
        let existing = std::fs::symlink_metadata(&t).ok();
        if e.meta.kind == Kind::Dir {
            let is_opaque = e.meta.xattrs.get(opaque).map(Vec::as_slice) == Some(b"y");
            // Whether what `target` has here ends the merge: a non-directory, or an
            // opaque directory.
            let hides_base = match &existing {
                Some(m) if m.is_dir() => {
                    read_meta(&t)?.xattrs.get(opaque).map(Vec::as_slice) == Some(b"y")
                }
                Some(_) => true,
                None => false,
            };
            if existing.as_ref().is_some_and(|m| is_opaque || !m.is_dir()) {
                fsutil::remove_any(&t).map_err(|err| Error::Io(io_at(&t, err)))?;
            }
            if std::fs::symlink_metadata(&t).is_err() {
                std::fs::create_dir(&t).map_err(|err| Error::Io(io_at(&t, err)))?;
            }
            let meta = if hides_base && !is_opaque {
                let mut m = e.meta.clone();
                m.xattrs.insert(opaque.to_owned(), b"y".to_vec());
                std::borrow::Cow::Owned(m)
            } else {
                std::borrow::Cow::Borrowed(&e.meta)
            };
            dirs.push((t, meta));
        } else {
            if kept.is_some_and(|k| k.contains(rel)) {
                continue;
            }
            if existing.is_some() {
                fsutil::remove_any(&t).map_err(|err| Error::Io(io_at(&t, err)))?;
            }
            if e.meta.nlink > 1 && !e.meta.is_whiteout() {
                let key = (e.meta.dev, e.meta.ino);
                if let Some(first) = links.get(&key) {
                    std::fs::hard_link(first, &t).map_err(|err| Error::Io(io_at(&t, err)))?;
                    continue;
                }
                links.insert(key, t.clone());
            }
            copy_entry(e, &t, &opts)?;
        }
    }
    // Directory metadata last, deepest first: adding entries changed their mtimes.
    for (path, meta) in dirs.iter().rev() {
        fsutil::apply_meta(path, meta, root, true)?;
    }
    Ok(())
}

/// Which whiteouts [`edit_in_place`] leaves for the entries it deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Whiteouts<'a> {
    /// None: the tree is complete on its own.
    None,
    /// One per deleted entry: the tree sits on a base that is not known.
    All,
    /// Those that hide something of `base` ([`idle_whiteout`]).
    Over { base: &'a BoxBase, opaque: &'a str },
}

impl<'a> Whiteouts<'a> {
    /// For a tree `over_base` (a box's), on `base` when it is known.
    pub(crate) fn of(over_base: bool, base: Option<&'a BoxBase>, opaque: &'a str) -> Whiteouts<'a> {
        match (over_base, base) {
            (false, _) => Whiteouts::None,
            (true, None) => Whiteouts::All,
            (true, Some(base)) => Whiteouts::Over { base, opaque },
        }
    }
}

/// Apply a cleanup plan to the complete tree `root` (a private copy or writable snapshot
/// of the tree the plan was computed from), in place: remove each `delete` entry (with
/// `remove`, which knows the backend's subvolumes) and leave an overlay whiteout in its
/// place as `whiteouts` says; empty each `truncate` file keeping its metadata (a new empty file
/// given the old one's owner, xattrs, mode and mtime); then give the
/// directories whose entries changed their mtime back.
pub(crate) fn edit_in_place(
    root: &Path,
    plan: &crate::derive::CleanupPlan,
    whiteouts: Whiteouts<'_>,
    remove: &dyn Fn(&Path) -> Result<()>,
) -> Result<()> {
    let owner = fsutil::is_root();
    let mut parents: std::collections::BTreeMap<PathBuf, crate::fsops::Meta> = Default::default();
    // Replacing an emptied file changes its directory's mtime too.
    for e in plan.delete.iter().chain(&plan.truncate) {
        let parent = e.rel.parent().unwrap_or(Path::new(""));
        if !parents.contains_key(parent) {
            let meta = read_meta(&fsutil::join(root, parent))?;
            parents.insert(parent.to_owned(), meta);
        }
    }
    // Each emptied file is replaced by a new empty one, never truncated where it is: a file
    // of a tree folded from layers is a link to the layer's own file (see
    // `CopyOpts::link_from`), which must never change. Names of one inode in the tree stay
    // names of one (new) inode.
    let mut replaced: std::collections::HashMap<(u64, u64), PathBuf> = Default::default();
    for e in &plan.truncate {
        let path = root.join(&e.rel);
        let before = read_meta(&path)?;
        if before.kind != Kind::File {
            return Err(Error::Corrupt {
                path,
                message: "scanned as a regular file, found otherwise in its copy".into(),
            });
        }
        let key = (before.dev, before.ino);
        if let Some(first) = replaced.get(&key) {
            std::fs::remove_file(&path).map_err(|err| Error::Io(io_at(&path, err)))?;
            std::fs::hard_link(first, &path).map_err(|err| Error::Io(io_at(&path, err)))?;
            continue;
        }
        if before.size == 0 {
            continue;
        }
        std::fs::remove_file(&path).map_err(|err| Error::Io(io_at(&path, err)))?;
        // No symlink is followed: the name was just freed in this private tree.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|err| Error::Io(io_at(&path, err)))?;
        fsutil::apply_meta(&path, &before, owner, true)?;
        replaced.insert(key, path);
    }
    let mut below: Option<Below> = None;
    for e in &plan.delete {
        let path = root.join(&e.rel);
        remove(&path)?;
        let keep = match whiteouts {
            Whiteouts::None => false,
            Whiteouts::All => true,
            Whiteouts::Over { base, opaque } => {
                let below = below.get_or_insert_with(|| Below::new(Vec::new(), Some(base.clone())));
                let opaque_at = |a: &Path| {
                    read_meta(&fsutil::join(root, a)).is_ok_and(|m| {
                        m.kind == Kind::Dir && crate::fsops::scan::is_opaque(&m, opaque)
                    })
                };
                !idle_whiteout(&e.rel, &opaque_at, below, opaque)?
            }
        };
        if keep {
            crate::backend::layers::make_whiteout(&path)?;
        }
    }
    // Any order: setting a directory's times changes nothing above it.
    for (rel, meta) in &parents {
        let path = fsutil::join(root, rel);
        fsutil::set_mtime(&path, meta.mtime_sec, meta.mtime_nsec)
            .map_err(|err| Error::Io(io_at(&path, err)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box swaps a directory of its layer for a symlink to a host directory after the
    /// commit planned its tree and before the tree is applied: nothing of the host's file
    /// reaches the layer (the copy refuses the path), while without `beneath` the same swap
    /// would have read it.
    #[test]
    fn a_directory_swapped_for_a_symlink_after_planning_copies_nothing_from_the_host() {
        let tmp = tempfile::tempdir().expect("tmp");
        let upper = tmp.path().join("upper");
        let host = tmp.path().join("host/d");
        fs_err::create_dir_all(upper.join("workspace/d")).expect("mkdir");
        fs_err::write(upper.join("workspace/d/f.txt"), "box's own").expect("write");
        fs_err::create_dir_all(&host).expect("mkdir");
        fs_err::write(host.join("f.txt"), "HOST SECRET").expect("write");
        let tree = scan_tree(&upper).expect("scan");
        fs_err::remove_dir_all(upper.join("workspace/d")).expect("rm");
        std::os::unix::fs::symlink(&host, upper.join("workspace/d")).expect("symlink");
        let leaked = |target: &Path| {
            fs_err::read_to_string(target.join("workspace/d/f.txt"))
                .is_ok_and(|t| t.contains("HOST SECRET"))
        };
        let opaque = "user.overlay.opaque";
        let guarded = tmp.path().join("guarded");
        fs_err::create_dir_all(&guarded).expect("mkdir");
        let _ = apply_overlay_tree(&tree, &guarded, opaque, None, Some(&upper), None);
        assert!(!leaked(&guarded), "the host's file reached the layer");
        // The control: the same apply without `beneath` follows the swapped directory.
        let unguarded = tmp.path().join("unguarded");
        fs_err::create_dir_all(&unguarded).expect("mkdir");
        let _ = apply_overlay_tree(&tree, &unguarded, opaque, None, None, None);
        assert!(leaked(&unguarded), "the control did not follow the symlink");
    }
}
