//! Scanning: the metadata of one path, a whole directory tree, or the merged view of an
//! overlayfs layer stack.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::{io_at, Entry, Kind, Meta, Tree};
use crate::{Error, Result};

/// Prefixes of the xattrs overlayfs uses for its own bookkeeping (opaque markers, redirects,
/// origin file handles, ...). They describe a layer, not the content of the merged tree.
const OVERLAY_XATTR_PREFIXES: [&str; 2] = ["trusted.overlay.", "user.overlay."];

/// True for overlayfs-private xattr names (`trusted.overlay.*`, `user.overlay.*`).
pub fn is_overlay_xattr(name: &str) -> bool {
    OVERLAY_XATTR_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// `lstat` of `path` plus every xattr (not following symlinks) and the link target of a
/// symlink. A filesystem without xattr support reports no xattrs.
pub fn read_meta(path: &Path) -> Result<Meta> {
    let md = std::fs::symlink_metadata(path).map_err(|e| io_at("lstat", path, e))?;
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: format!("unknown file type (mode {:o})", md.mode()),
        });
    };
    let target = if kind == Kind::Symlink {
        Some(std::fs::read_link(path).map_err(|e| io_at("readlink", path, e))?)
    } else {
        None
    };
    Ok(Meta {
        kind,
        perm: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: md.size(),
        mtime_sec: md.mtime(),
        mtime_nsec: md.mtime_nsec(),
        ctime_sec: md.ctime(),
        ctime_nsec: md.ctime_nsec(),
        dev: md.dev(),
        ino: md.ino(),
        nlink: md.nlink(),
        rdev: md.rdev(),
        target,
        xattrs: read_xattrs(path)?,
    })
}

/// True when an xattr call failed because the filesystem (or the file type) has no xattrs.
fn xattrs_unsupported(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(code) if code == rustix::io::Errno::OPNOTSUPP.raw_os_error()
    ) || err.kind() == std::io::ErrorKind::Unsupported
}

/// Every xattr of `path` (not following a symlink).
pub(crate) fn read_xattrs(path: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for key in xattr_names(path)? {
        match xattr::get(path, &key) {
            // Removed between list and get: not part of the snapshot.
            Ok(None) => {}
            Ok(Some(value)) => {
                out.insert(key, value);
            }
            Err(e) if xattrs_unsupported(&e) => {}
            Err(e) => return Err(io_at(&format!("getxattr {key}"), path, e)),
        }
    }
    Ok(out)
}

/// The names of the xattrs of `path` (not following a symlink); none on a filesystem
/// without xattrs.
pub(crate) fn xattr_names(path: &Path) -> Result<Vec<String>> {
    match xattr::list(path) {
        Ok(names) => names.map(|n| xattr_name(path, n)).collect(),
        Err(e) if xattrs_unsupported(&e) => Ok(Vec::new()),
        Err(e) => Err(io_at("listxattr", path, e)),
    }
}

fn xattr_name(path: &Path, name: OsString) -> Result<String> {
    name.into_string().map_err(|raw| Error::Corrupt {
        path: path.to_path_buf(),
        message: format!("xattr name {raw:?} is not valid UTF-8"),
    })
}

/// The names in directory `dir`, sorted.
fn list_dir(dir: &Path) -> Result<Vec<OsString>> {
    let mut names = Vec::new();
    for item in std::fs::read_dir(dir).map_err(|e| io_at("read directory", dir, e))? {
        let item = item.map_err(|e| io_at("read directory", dir, e))?;
        names.push(item.file_name());
    }
    names.sort();
    Ok(names)
}

/// Every entry under `root` (the root itself included, with the empty relative path),
/// never following symlinks. Overlay xattrs are kept: this reports a raw directory.
///
/// The walk goes level by level; the directories of a level are read by one thread per
/// core, since reading metadata (lstat, xattrs) is most of the cost of exporting or diffing
/// a large tree.
pub fn scan_tree(root: &Path) -> Result<Tree> {
    let mut tree = Tree::default();
    let meta = read_meta(root)?;
    let is_dir = meta.is_dir();
    tree.entries.insert(
        PathBuf::new(),
        Entry {
            rel: PathBuf::new(),
            src: root.to_path_buf(),
            meta,
        },
    );
    if !is_dir {
        return Ok(tree);
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let mut level: Vec<(PathBuf, PathBuf)> = vec![(root.to_path_buf(), PathBuf::new())];
    while !level.is_empty() {
        let results: Vec<Result<Scanned>> = if workers == 1 || level.len() == 1 {
            vec![scan_dirs(&level)]
        } else {
            let chunk = level.len().div_ceil(workers);
            std::thread::scope(|s| {
                let handles: Vec<_> = level
                    .chunks(chunk)
                    .map(|dirs| s.spawn(move || scan_dirs(dirs)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .expect("a scan worker only returns errors, never panics")
                    })
                    .collect()
            })
        };
        let mut next = Vec::new();
        for result in results {
            let (entries, dirs) = result?;
            for e in entries {
                tree.entries.insert(e.rel.clone(), e);
            }
            next.extend(dirs);
        }
        level = next;
    }
    Ok(tree)
}

/// Entries found in some directories, and the subdirectories among them (absolute, relative).
type Scanned = (Vec<Entry>, Vec<(PathBuf, PathBuf)>);

/// The children of each directory `(absolute, relative)` of `dirs`.
fn scan_dirs(dirs: &[(PathBuf, PathBuf)]) -> Result<Scanned> {
    let mut entries = Vec::new();
    let mut subdirs = Vec::new();
    for (abs, rel) in dirs {
        for name in list_dir(abs)? {
            let child_abs = abs.join(&name);
            let child_rel = rel.join(&name);
            let meta = read_meta(&child_abs)?;
            if meta.is_dir() {
                subdirs.push((child_abs.clone(), child_rel.clone()));
            }
            entries.push(Entry {
                rel: child_rel,
                src: child_abs,
                meta,
            });
        }
    }
    Ok((entries, subdirs))
}

/// An overlayfs whiteout: a 0/0 character device, or (overlayfs ≥ 6.7) a regular file
/// carrying the `overlay.whiteout` xattr.
pub(crate) fn is_whiteout(meta: &Meta) -> bool {
    meta.is_whiteout()
        || (meta.kind == Kind::File
            && (meta.xattrs.contains_key("trusted.overlay.whiteout")
                || meta.xattrs.contains_key("user.overlay.whiteout")))
}

/// A directory whose lower layers are hidden (`overlay.opaque` = "y").
pub(crate) fn is_opaque(meta: &Meta) -> bool {
    ["trusted.overlay.opaque", "user.overlay.opaque"]
        .iter()
        .any(|k| meta.xattrs.get(*k).map(|v| v.as_slice()) == Some(b"y"))
}

/// Remove overlayfs bookkeeping xattrs (`trusted.overlay.*`, `user.overlay.*`): they
/// describe layers, not content.
pub fn strip_overlay_xattrs(meta: &mut Meta) {
    meta.xattrs.retain(|k, _| !is_overlay_xattr(k));
}

/// The merged view of an overlayfs stack; `layers[0]` is the topmost layer.
///
/// Whiteouts hide the path (and everything under it) in lower layers and are not entries of
/// the result; an opaque directory hides the lower layers' contents of that directory; a
/// non-directory hides whatever lies below it; directories over directories merge. Each
/// entry's `src` is its path in the layer that provides it, and overlay-private xattrs are
/// removed from every `Meta`.
pub fn scan_chain(layers: &[&Path]) -> Result<Tree> {
    let mut tree = Tree::default();
    let Some(top) = layers.first() else {
        return Ok(tree);
    };
    if let [only] = layers {
        // One layer merges with nothing: its tree minus whiteouts (which hide nothing and are
        // not entries) and overlay bookkeeping. The parallel walk makes this the fast path
        // for btrfs nodes and complete layers.
        let mut tree = scan_tree(only)?;
        if !tree.root().is_some_and(|r| r.meta.is_dir()) {
            return Err(Error::Backend {
                path: only.to_path_buf(),
                message: "a layer root must be a directory".into(),
            });
        }
        tree.entries
            .retain(|rel, e| rel.as_os_str().is_empty() || !is_whiteout(&e.meta));
        for e in tree.entries.values_mut() {
            strip_overlay_xattrs(&mut e.meta);
        }
        return Ok(tree);
    }
    let mut root_meta = read_meta(top)?;
    if !root_meta.is_dir() {
        return Err(Error::Backend {
            path: top.to_path_buf(),
            message: "a layer root must be a directory".into(),
        });
    }
    // The root merges every layer down to (and including) the first opaque one.
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let meta = if i == 0 {
            root_meta.clone()
        } else {
            read_meta(layer)?
        };
        if !meta.is_dir() {
            return Err(Error::Backend {
                path: layer.to_path_buf(),
                message: "a layer root must be a directory".into(),
            });
        }
        dirs.push(layer.to_path_buf());
        if is_opaque(&meta) {
            break;
        }
    }
    strip_overlay_xattrs(&mut root_meta);
    tree.entries.insert(
        PathBuf::new(),
        Entry {
            rel: PathBuf::new(),
            src: top.to_path_buf(),
            meta: root_meta,
        },
    );
    merge_dir(&dirs, Path::new(""), &mut tree)?;
    Ok(tree)
}

/// The entries strictly below directory `rel` of a merged view, where `dirs` are the
/// directories (topmost first, cut at the first opaque one) that make up `rel` in it, as
/// [`scan_chain`] would report them.
pub(crate) fn scan_chain_below(dirs: &[PathBuf], rel: &Path) -> Result<Tree> {
    let mut tree = Tree::default();
    merge_dir(dirs, rel, &mut tree)?;
    Ok(tree)
}

/// Name `name` in the merged directory made of `dirs` (topmost first, cut at the first
/// opaque one), as overlayfs resolves it: the first layer that has it decides what it is
/// (its path and metadata, overlay xattrs not yet stripped); a whiteout hides it in every
/// lower layer, a non-directory hides everything below it; a directory merges with the
/// directories of that name below it, down to an opaque one (the third value). `None`:
/// the name is not in the merged view.
pub(crate) fn merged_child(
    dirs: &[PathBuf],
    name: &std::ffi::OsStr,
) -> Result<Option<(PathBuf, Meta, Vec<PathBuf>)>> {
    let mut provider: Option<(PathBuf, Meta)> = None;
    let mut merged: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let abs = dir.join(name);
        let meta = match read_meta(&abs) {
            Ok(m) => m,
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if is_whiteout(&meta) {
            break;
        }
        if !meta.is_dir() {
            if provider.is_none() {
                provider = Some((abs, meta));
            }
            break;
        }
        let opaque = is_opaque(&meta);
        merged.push(abs.clone());
        if provider.is_none() {
            provider = Some((abs, meta));
        }
        if opaque {
            break;
        }
    }
    Ok(provider.map(|(src, meta)| (src, meta, merged)))
}

/// Merge the children of directory `rel`, present as a directory at each of `dirs` (topmost
/// first, already cut at the first opaque one).
fn merge_dir(dirs: &[PathBuf], rel: &Path, tree: &mut Tree) -> Result<()> {
    let mut names = BTreeSet::new();
    for dir in dirs {
        names.extend(list_dir(dir)?);
    }
    for name in names {
        let child_rel = rel.join(&name);
        let Some((src, mut meta, child_dirs)) = merged_child(dirs, &name)? else {
            continue;
        };
        let is_dir = meta.is_dir();
        strip_overlay_xattrs(&mut meta);
        tree.entries.insert(
            child_rel.clone(),
            Entry {
                rel: child_rel.clone(),
                src,
                meta,
            },
        );
        if is_dir {
            merge_dir(&child_dirs, &child_rel, tree)?;
        }
    }
    Ok(())
}
