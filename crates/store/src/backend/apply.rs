//! Applying an overlay-format layer onto a complete tree, in place.

use std::path::{Path, PathBuf};

use crate::bundle::fsutil;
use crate::fsops::copy::{copy_entry, CopyOpts};
use crate::fsops::scan::scan_tree;
use crate::fsops::Kind;
use crate::store::io_at;
use crate::{Error, Result};

/// Apply the overlay-format layer `diff` onto the tree `target`, keeping overlay markers as
/// they are (the target is itself a layer above some base): a whiteout replaces whatever is
/// at its path, a directory marked opaque replaces the directory there (its old content
/// goes), other directories merge, every other entry replaces what is there. Data is
/// reflinked where the filesystem can; metadata is exact. Symlinks in `target` are never
/// followed: entries are replaced, not written through.
/// `opaque` is the store's opaque-directory attribute (`trusted.` or `user.overlay.opaque`).
pub(crate) fn apply_overlay_layer(diff: &Path, target: &Path, opaque: &str) -> Result<()> {
    let tree = scan_tree(diff)?;
    let root = fsutil::is_root();
    let opts = CopyOpts {
        reflink: true,
        ignore_owner_errors: !root,
        xattr_filter: None,
    };
    let mut dirs: Vec<(PathBuf, &crate::fsops::Meta)> = Vec::new();
    // Entries come parents first (sorted paths).
    for (rel, e) in &tree.entries {
        let t = target.join(rel);
        if rel.as_os_str().is_empty() {
            dirs.push((t, &e.meta));
            continue;
        }
        let existing = std::fs::symlink_metadata(&t).ok();
        if e.meta.kind == Kind::Dir {
            let is_opaque = e.meta.xattrs.get(opaque).map(Vec::as_slice) == Some(b"y");
            if existing.as_ref().is_some_and(|m| is_opaque || !m.is_dir()) {
                fsutil::remove_any(&t).map_err(|err| Error::Io(io_at(&t, err)))?;
            }
            if std::fs::symlink_metadata(&t).is_err() {
                std::fs::create_dir(&t).map_err(|err| Error::Io(io_at(&t, err)))?;
            }
            dirs.push((t, &e.meta));
        } else {
            if existing.is_some() {
                fsutil::remove_any(&t).map_err(|err| Error::Io(io_at(&t, err)))?;
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
