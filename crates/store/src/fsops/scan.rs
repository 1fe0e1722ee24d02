//! Scanning: the metadata of one path, a whole directory tree, or the merged view of an
//! overlayfs layer stack.
//!
//! One file (over 600 lines): the three scans share the no-follow, beneath-a-root metadata
//! reader and one set of overlay-marker rules (whiteouts, opaque directories), which must
//! stay identical across them.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
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
    read_meta_named(path, path)
}

/// [`read_meta`] of `root/rel` where `rel` is untrusted (a box's tree): no directory on
/// the way is looked up through a symlink or outside `root`, so a box that swapped one
/// for a symlink after a scan cannot make the host read another file's metadata. Such a
/// path reads as not found.
///
/// How: the parent is opened beneath `root` (`openat2`, no symlinks), and the entry is
/// read through the parent's `/proc/self/fd` link (which names exactly that directory)
/// without following it: the xattr calls have no form relative to a directory
/// descriptor.
pub fn read_meta_beneath(root: &Path, rel: &Path) -> Result<Meta> {
    let shown = root.join(rel);
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return read_meta(root);
    };
    let dir =
        open_dir_beneath(root, parent).map_err(|e| io_at("open the directory of", &shown, e))?;
    let via = Path::new("/proc/self/fd")
        .join(rustix::fd::AsRawFd::as_raw_fd(&dir).to_string())
        .join(name);
    read_meta_named(&via, &shown)
}

/// `root/rel` opened as a directory (`O_PATH`), every component looked up beneath `root`
/// and none through a symlink: `ELOOP`, `ENOTDIR` or `EXDEV` read as not found.
pub(crate) fn open_dir_beneath(root: &Path, rel: &Path) -> std::io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root_fd = rustix::fs::open(root, flags, Mode::empty())?;
    if rel.as_os_str().is_empty() {
        return Ok(root_fd);
    }
    rustix::fs::openat2(
        &root_fd,
        rel,
        flags | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        if e == rustix::io::Errno::LOOP
            || e == rustix::io::Errno::NOTDIR
            || e == rustix::io::Errno::XDEV
        {
            std::io::Error::from(std::io::ErrorKind::NotFound)
        } else {
            e.into()
        }
    })
}

/// [`read_meta`] of `path`, with errors naming `shown`.
fn read_meta_named(path: &Path, shown: &Path) -> Result<Meta> {
    read_meta_at(rustix::fs::CWD, path.as_os_str(), path, shown)
}

/// The metadata of `name` in directory `dir` (not following a symlink): `statx` and
/// `readlinkat` relative to `dir`, so a scan that holds each directory open looks up one
/// component per entry instead of the whole path. The xattr calls have no form relative to a
/// directory descriptor: they go through `xattr_path`, which must name the same entry.
/// Errors name `shown`.
fn read_meta_at<Fd: rustix::fd::AsFd>(
    dir: Fd,
    name: &std::ffi::OsStr,
    xattr_path: &Path,
    shown: &Path,
) -> Result<Meta> {
    use rustix::fs::{AtFlags, FileType, StatxFlags};
    let dir = dir.as_fd();
    let stx = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
    .map_err(|e| io_at("lstat", shown, e.into()))?;
    let mode = u32::from(stx.stx_mode);
    let kind = match FileType::from_raw_mode(mode) {
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        FileType::RegularFile => Kind::File,
        FileType::Fifo => Kind::Fifo,
        FileType::Socket => Kind::Socket,
        FileType::CharacterDevice => Kind::CharDev,
        FileType::BlockDevice => Kind::BlockDev,
        FileType::Unknown => {
            return Err(Error::Corrupt {
                path: shown.to_path_buf(),
                message: format!("unknown file type (mode {mode:o})"),
            })
        }
    };
    let target = if kind == Kind::Symlink {
        let link = rustix::fs::readlinkat(dir, name, Vec::new())
            .map_err(|e| io_at("readlink", shown, e.into()))?;
        Some(PathBuf::from(OsString::from_vec(link.into_bytes())))
    } else {
        None
    };
    // statx reports a birth time only where the filesystem keeps one (as `Metadata::created`).
    let btime = StatxFlags::from_bits_retain(stx.stx_mask)
        .contains(StatxFlags::BTIME)
        .then_some((stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec));
    Ok(Meta {
        kind,
        perm: mode & 0o7777,
        uid: stx.stx_uid,
        gid: stx.stx_gid,
        size: stx.stx_size,
        mtime_sec: stx.stx_mtime.tv_sec,
        mtime_nsec: i64::from(stx.stx_mtime.tv_nsec),
        ctime_sec: stx.stx_ctime.tv_sec,
        ctime_nsec: i64::from(stx.stx_ctime.tv_nsec),
        btime,
        dev: rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        ino: stx.stx_ino,
        nlink: u64::from(stx.stx_nlink),
        rdev: rustix::fs::makedev(stx.stx_rdev_major, stx.stx_rdev_minor),
        target,
        xattrs: read_xattrs_named(xattr_path, shown)?,
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
    read_xattrs_named(path, path)
}

fn read_xattrs_named(path: &Path, shown: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for key in xattr_names_named(path, shown)? {
        match xattr::get(path, &key) {
            // Removed between list and get: not part of the snapshot.
            Ok(None) => {}
            Ok(Some(value)) => {
                out.insert(key, value);
            }
            Err(e) if xattrs_unsupported(&e) => {}
            Err(e) => return Err(io_at(&format!("getxattr {key}"), shown, e)),
        }
    }
    Ok(out)
}

/// The names of the xattrs of `path` (not following a symlink); none on a filesystem
/// without xattrs.
pub(crate) fn xattr_names(path: &Path) -> Result<Vec<String>> {
    xattr_names_named(path, path)
}

fn xattr_names_named(path: &Path, shown: &Path) -> Result<Vec<String>> {
    match xattr::list(path) {
        Ok(names) => names.map(|n| xattr_name(shown, n)).collect(),
        Err(e) if xattrs_unsupported(&e) => Ok(Vec::new()),
        Err(e) => Err(io_at("listxattr", shown, e)),
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

/// The children of each directory `(absolute, relative)` of `dirs`. Each directory is held
/// open while its entries are read relative to it; it is opened without following a
/// symlink, so a directory swapped for one after its parent was read is an error, not a
/// detour.
fn scan_dirs(dirs: &[(PathBuf, PathBuf)]) -> Result<Scanned> {
    let mut entries = Vec::new();
    let mut subdirs = Vec::new();
    for (abs, rel) in dirs {
        let dir = open_dir(abs)?;
        for name in list_dir_fd(&dir, abs)? {
            let child_abs = abs.join(&name);
            let meta = read_meta_at(&dir, &name, &child_abs, &child_abs)?;
            let child_rel = rel.join(&name);
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

/// Directory `dir` opened for reading, not through a symlink.
fn open_dir(dir: &Path) -> Result<rustix::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_at("open directory", dir, e.into()))
}

/// The names in the open directory `dir` (shown as `shown`), sorted.
fn list_dir_fd(dir: &rustix::fd::OwnedFd, shown: &Path) -> Result<Vec<OsString>> {
    let mut names = Vec::new();
    let mut reader =
        rustix::fs::Dir::read_from(dir).map_err(|e| io_at("read directory", shown, e.into()))?;
    while let Some(item) = reader.read() {
        let item = item.map_err(|e| io_at("read directory", shown, e.into()))?;
        let name = item.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name.to_vec()));
        }
    }
    names.sort();
    Ok(names)
}

/// A directory whose lower layers are hidden: its attribute `opaque` (the store's,
/// `trusted.overlay.opaque` or `user.overlay.opaque`, see `StoreConfig::overlay_xattrs`) is
/// "y". Only the store's namespace counts, as only it counts for the overlay that mounts
/// the layers: the other one is a plain attribute, which a box may set.
pub(crate) fn is_opaque(meta: &Meta, opaque: &str) -> bool {
    meta.xattrs.get(opaque).map(|v| v.as_slice()) == Some(b"y")
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
/// non-directory hides whatever lies below it; directories over directories merge; the
/// roots of all layers merge, whatever attributes they carry (as in overlayfs). `opaque`
/// names the attribute that marks an opaque directory in these layers (see [`is_opaque`]). Each
/// entry's `src` is its path in the layer that provides it, and overlay-private xattrs are
/// removed from every `Meta`.
pub fn scan_chain(layers: &[&Path], opaque: &str) -> Result<Tree> {
    if layers.is_empty() {
        return Ok(Tree::default());
    }
    // Each layer is scanned whole (in parallel, by `scan_tree`) and the layers are laid
    // over each other in memory, bottom first. That reads every entry of every layer once,
    // where resolving name by name through the stack (`merge_dir`) stats each name in every
    // layer: on a chain of a complete layer and a few small ones, most of the cost.
    // Every layer's root merges, opaque or not: overlayfs never looks a root up, so it
    // never reads an `opaque` attribute there.
    let mut scans = Vec::with_capacity(layers.len());
    for layer in layers.iter().rev() {
        let scan = scan_tree(layer)?;
        if !scan.root().is_some_and(|r| r.meta.is_dir()) {
            return Err(Error::Backend {
                path: layer.to_path_buf(),
                message: "a layer root must be a directory".into(),
            });
        }
        scans.push(scan);
    }
    let mut scans = scans.into_iter();
    let mut tree = scans
        .next()
        .expect("the chain is not empty, so it has a bottom layer");
    // The bottom layer's whiteouts hide nothing.
    tree.entries
        .retain(|rel, e| rel.as_os_str().is_empty() || !e.meta.is_whiteout());
    for upper in scans {
        lay_over(&mut tree, upper, opaque);
    }
    for e in tree.entries.values_mut() {
        strip_overlay_xattrs(&mut e.meta);
    }
    Ok(tree)
}

/// The entries of [`scan_chain`]`(layers, opaque)`, handed to `f` one at a time in the same
/// order (parents before children, names sorted), as the stack is read depth first: a
/// consumer (an export) can work on the first entries while the rest are being read,
/// where [`scan_chain`] reads every layer whole first. Each name is resolved as overlayfs
/// resolves it (see [`merged_child`]) and looked up only in the layers that list it. The
/// first error, of the walk or of `f`, stops it.
///
/// No directory is held open across the walk of its subdirectories: the open directories
/// stay within one per layer of the current directory, however deep the tree.
pub fn walk_chain(
    layers: &[&Path],
    opaque: &str,
    f: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    let Some(top) = layers.first() else {
        return Ok(());
    };
    // Every layer's root merges, opaque or not (as in `scan_chain`); the topmost gives the
    // root its metadata.
    let mut root = None;
    for layer in layers {
        let meta = read_meta(layer)?;
        if !meta.is_dir() {
            return Err(Error::Backend {
                path: layer.to_path_buf(),
                message: "a layer root must be a directory".into(),
            });
        }
        root.get_or_insert(meta);
    }
    let mut meta = root.expect("the chain is not empty, so it has a top layer");
    strip_overlay_xattrs(&mut meta);
    f(Entry {
        rel: PathBuf::new(),
        src: top.to_path_buf(),
        meta,
    })?;
    let dirs: Vec<PathBuf> = layers.iter().map(|l| l.to_path_buf()).collect();
    walk_merged(&dirs, Path::new(""), opaque, f)
}

/// One child of a merged directory: its entry, and the directories it merges (topmost
/// first, cut at the first opaque one) when it is a directory.
type Resolved = (Entry, Vec<PathBuf>);

/// Hand `f` the entries below the merged directory `rel` made of `dirs` (topmost first,
/// already cut at the first opaque one), depth first.
fn walk_merged(
    dirs: &[PathBuf],
    rel: &Path,
    opaque: &str,
    f: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    for (entry, child_dirs) in resolve_children(dirs, rel, opaque)? {
        let is_dir = entry.meta.is_dir();
        let child_rel = entry.rel.clone();
        f(entry)?;
        if is_dir {
            walk_merged(&child_dirs, &child_rel, opaque, f)?;
        }
    }
    Ok(())
}

/// The children of the merged directory `rel` made of `dirs`, sorted by name, resolved as
/// [`merged_child`] resolves a name; each directory of `dirs` is open only while this runs.
fn resolve_children(dirs: &[PathBuf], rel: &Path, opaque: &str) -> Result<Vec<Resolved>> {
    let mut open = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let fd = open_dir(dir)?;
        let names = list_dir_fd(&fd, dir)?;
        open.push((dir, fd, names));
    }
    let mut names: Vec<&OsString> = open.iter().flat_map(|(_, _, n)| n).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let mut found = Resolution::default();
        for (dir, fd, listed) in &open {
            if listed.binary_search(name).is_err() {
                continue;
            }
            let abs = dir.join(name);
            let meta = read_meta_at(fd, name, &abs, &abs)?;
            if !found.layer(abs, meta, opaque) {
                break;
            }
        }
        let Resolution {
            provider: Some((src, mut meta)),
            merged,
        } = found
        else {
            continue;
        };
        strip_overlay_xattrs(&mut meta);
        out.push((
            Entry {
                rel: rel.join(name),
                src,
                meta,
            },
            merged,
        ));
    }
    Ok(out)
}

/// The layers `layers` (top first, raw overlay form) folded into the tree of one layer that
/// shows, over any base, what the stack shows over it — overlay markers kept, unlike
/// [`scan_chain`]: the bottom layer as it is (its whiteouts hide the base), each layer above
/// laid over it by [`fold_over`]. Entries name the layer file that provides them.
pub fn fold_chain(layers: &[&Path], opaque: &str) -> Result<Tree> {
    let mut up = layers.iter().rev();
    let Some(bottom) = up.next() else {
        return Ok(Tree::default());
    };
    let mut tree = scan_tree(bottom)?;
    for layer in up {
        fold_over(&mut tree, scan_tree(layer)?, opaque);
    }
    Ok(tree)
}

/// Lay the raw scan of one layer over the fold of the layers below it (itself a layer over
/// some base), keeping what marks the base hidden: a whiteout or a non-directory replaces
/// whatever was there (a directory with all its contents); an opaque directory replaces
/// what was there; another directory merges with a directory below it — staying opaque
/// when that one is — or, put where the fold has a non-directory (a whiteout, a file,
/// which ended the merge there), becomes opaque, so that nothing of the base shows
/// through it. The layer's root provides the root's metadata.
fn fold_over(tree: &mut Tree, upper: Tree, opaque: &str) {
    for (rel, mut entry) in upper.entries {
        if rel.as_os_str().is_empty() {
            tree.entries.insert(rel, entry);
            continue;
        }
        if entry.meta.is_dir() && !is_opaque(&entry.meta, opaque) {
            match tree.entries.get(&rel) {
                Some(below) if below.meta.is_dir() => {
                    if is_opaque(&below.meta, opaque) {
                        entry.meta.xattrs.insert(opaque.to_owned(), b"y".to_vec());
                    }
                    tree.entries.insert(rel, entry);
                    continue;
                }
                Some(_) => {
                    entry.meta.xattrs.insert(opaque.to_owned(), b"y".to_vec());
                }
                None => {}
            }
        }
        remove_subtree(tree, &rel);
        tree.entries.insert(rel, entry);
    }
}

/// Lay the raw scan of one layer over the merged tree of the layers below it, as overlayfs
/// resolves a name: a whiteout hides the path and everything under it; a non-directory
/// replaces whatever was there (a directory with all its contents); a directory merges with
/// a directory below it unless it is opaque, and otherwise replaces what was there. The
/// layer's root merges with the root below and provides its metadata.
fn lay_over(tree: &mut Tree, upper: Tree, opaque: &str) {
    // `entries` iterates parents before children, so a directory is settled before its
    // contents from the same layer arrive.
    for (rel, entry) in upper.entries {
        if rel.as_os_str().is_empty() {
            tree.entries.insert(rel, entry);
            continue;
        }
        if entry.meta.is_whiteout() {
            remove_subtree(tree, &rel);
            continue;
        }
        let merges = entry.meta.is_dir()
            && !is_opaque(&entry.meta, opaque)
            && tree.entries.get(&rel).is_some_and(|e| e.meta.is_dir());
        if !merges {
            remove_subtree(tree, &rel);
        }
        tree.entries.insert(rel, entry);
    }
}

/// Remove `rel` and every entry below it. Paths order by components, so the entries below
/// `rel` are exactly the run of keys right after it that start with it.
fn remove_subtree(tree: &mut Tree, rel: &Path) {
    use std::ops::Bound;
    tree.entries.remove(rel);
    let below: Vec<PathBuf> = tree
        .entries
        .range::<Path, _>((Bound::Excluded(rel), Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(rel))
        .map(|(k, _)| k.clone())
        .collect();
    for k in below {
        tree.entries.remove(&k);
    }
}

/// The entries strictly below directory `rel` of a merged view, where `dirs` are the
/// directories (topmost first, cut at the first opaque one) that make up `rel` in it, as
/// [`scan_chain`] would report them.
pub(crate) fn scan_chain_below(dirs: &[PathBuf], rel: &Path, opaque: &str) -> Result<Tree> {
    let mut tree = Tree::default();
    merge_dir(dirs, rel, opaque, &mut tree)?;
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
    opaque: &str,
) -> Result<Option<(PathBuf, Meta, Vec<PathBuf>)>> {
    let mut found = Resolution::default();
    for dir in dirs {
        let abs = dir.join(name);
        let meta = match read_meta(&abs) {
            Ok(m) => m,
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !found.layer(abs, meta, opaque) {
            break;
        }
    }
    let Resolution { provider, merged } = found;
    Ok(provider.map(|(src, meta)| (src, meta, merged)))
}

/// How one name resolves through a stack of layers, fed the name as each layer that has it
/// holds it, topmost first (see [`merged_child`]).
#[derive(Default)]
struct Resolution {
    /// The entry the merged view shows: the topmost one.
    provider: Option<(PathBuf, Meta)>,
    /// The directories of that name that merge, when it is a directory.
    merged: Vec<PathBuf>,
}

impl Resolution {
    /// Take the name as the layer at `abs` holds it; false when the layers below no longer
    /// count: a whiteout or a non-directory hides them, and so does an opaque directory.
    fn layer(&mut self, abs: PathBuf, meta: Meta, opaque: &str) -> bool {
        if meta.is_whiteout() {
            return false;
        }
        let goes_on = meta.is_dir() && !is_opaque(&meta, opaque);
        if meta.is_dir() {
            self.merged.push(abs.clone());
        }
        if self.provider.is_none() {
            self.provider = Some((abs, meta));
        }
        goes_on
    }
}

/// Merge the children of directory `rel`, present as a directory at each of `dirs` (topmost
/// first, already cut at the first opaque one).
fn merge_dir(dirs: &[PathBuf], rel: &Path, opaque: &str, tree: &mut Tree) -> Result<()> {
    let mut names = BTreeSet::new();
    for dir in dirs {
        names.extend(list_dir(dir)?);
    }
    for name in names {
        let child_rel = rel.join(&name);
        let Some((src, mut meta, child_dirs)) = merged_child(dirs, &name, opaque)? else {
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
            merge_dir(&child_dirs, &child_rel, opaque, tree)?;
        }
    }
    Ok(())
}
