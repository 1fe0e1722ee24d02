//! Copying scanned trees with full fidelity.
//!
//! Order of operations per entry: create, write the content, `chown` (which clears
//! setuid/setgid and file capabilities), set xattrs, `chmod` (so the full mode survives the
//! umask and the chown), then the mtime. Directories get their metadata after all their
//! children are written, deepest first, so that creating the children does not disturb their
//! mtime and a read-only directory can still be filled.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, SeekFrom, CWD};
use rustix::io::Errno;

use super::{errno_at, io_at, scan::scan_tree, Entry, Kind, Meta, Tree};
use crate::{Error, Result};

/// Options of [`copy_tree`] / [`copy_entry`].
#[derive(Debug, Clone)]
pub struct CopyOpts {
    /// Try a reflink (`FICLONE`) for regular files first; fall back to copying the data
    /// segments when the filesystem cannot share extents.
    pub reflink: bool,
    /// When `chown` fails with `EPERM` (not running as root), keep the copier's ownership
    /// instead of failing.
    pub ignore_owner_errors: bool,
    /// Xattrs for which this returns `false` are not copied. `None` copies every xattr.
    pub xattr_filter: Option<fn(&str) -> bool>,
    /// Regular files whose source lies under this directory become hard links to their
    /// source instead of copies (all their metadata is then the source's, by definition).
    /// Only for the store's layer directory: a published layer's files never change (writes
    /// through an overlay go to its upper directory, and every edit of a tree made from
    /// layers replaces entries, never writes into one), so sharing their inodes shares
    /// nothing mutable. A link the filesystem refuses (its link limit) is a copy instead.
    /// A file that carries overlay attributes (a copy-up's bookkeeping) is copied without
    /// them unless `link_marked`.
    pub link_from: Option<PathBuf>,
    /// With `link_from`, link the files that carry overlay attributes too. Only for a copy
    /// into another layer of the same kind, which may carry what its source layers did
    /// (a fold of diff layers into one); a complete layer never carries them.
    pub link_marked: bool,
    /// Regular files below this directory are opened without following any symlink on the
    /// way from it (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`). For a tree the
    /// box controls, its upper directory: the box may replace a directory by a symlink
    /// between the scan and the copy, which would otherwise make the host copy whatever the
    /// symlink points at into the box's layer.
    pub beneath: Option<PathBuf>,
    /// Copies of regular files made earlier (while a box's command ran): an entry with an
    /// exact copy there gets it renamed into place instead of being copied (see
    /// [`crate::backend::prestage`]). A copy that cannot be renamed (another filesystem)
    /// is deleted and the entry copied.
    pub prestaged: Option<std::sync::Arc<crate::backend::prestage::Prestaged>>,
}

impl Default for CopyOpts {
    /// Reflink when possible, fail on any ownership error, copy every xattr.
    fn default() -> Self {
        CopyOpts {
            reflink: true,
            ignore_owner_errors: false,
            xattr_filter: None,
            link_from: None,
            link_marked: false,
            beneath: None,
            prestaged: None,
        }
    }
}

/// What a copy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Regular files created (hardlinks not included).
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Fifos, sockets and device nodes.
    pub specials: u64,
    /// Entries created as a hardlink to an earlier copy of the same inode.
    pub hardlinks: u64,
    /// Regular files linked to their source ([`CopyOpts::link_from`]), not copied.
    pub shared: u64,
    /// Regular files cloned with a reflink.
    pub reflinked: u64,
    /// Bytes of data written (data segments only; holes and reflinks not counted).
    pub bytes_copied: u64,
    /// Regular files renamed into place from [`CopyOpts::prestaged`], not copied.
    pub prestaged: u64,
    /// A reflink was refused as unsupported: the rest of this copy does not try again (one
    /// failing ioctl per file adds up over tens of thousands of files).
    pub reflink_unsupported: bool,
}

/// Materialise `tree` at `dst_root`, which must not exist or be a directory (normally empty).
/// The root's own metadata is applied to `dst_root`.
pub fn copy_tree(tree: &Tree, dst_root: &Path, opts: &CopyOpts) -> Result<CopyStats> {
    let mut stats = CopyStats::default();
    let Some(root) = tree.root() else {
        return Ok(stats);
    };
    if !root.meta.is_dir() {
        copy_one(root, dst_root, opts, &mut stats)?;
        return Ok(stats);
    }
    match std::fs::symlink_metadata(dst_root) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => {
            return Err(Error::Backend {
                path: dst_root.to_path_buf(),
                message: "copy destination exists and is not a directory".into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            make_dir(dst_root)?;
        }
        Err(e) => return Err(io_at("lstat", dst_root, e)),
    }
    stats.dirs += 1;

    // Directories first, in order (parents before children), so the files can then be
    // written in any order, by several threads.
    let mut dirs: Vec<(&Entry, PathBuf)> = vec![(root, dst_root.to_path_buf())];
    let mut files: Vec<(&Entry, PathBuf)> = Vec::new();
    // Names of multiply-linked inodes: the first of each (in tree order) is copied with
    // the others, every later one is linked to it once all are copied.
    let mut firsts: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut later: Vec<(PathBuf, PathBuf)> = Vec::new();
    for (rel, entry) in &tree.entries {
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dst = dst_root.join(rel);
        if entry.meta.is_dir() {
            make_dir(&dst)?;
            stats.dirs += 1;
            dirs.push((entry, dst));
            continue;
        }
        if entry.meta.nlink > 1 {
            let key = (entry.meta.dev, entry.meta.ino);
            if let Some(first) = firsts.get(&key) {
                later.push((first.clone(), dst));
                continue;
            }
            firsts.insert(key, dst.clone());
        }
        files.push((entry, dst));
    }
    copy_files(&files, opts, &mut stats)?;
    for (first, dst) in &later {
        std::fs::hard_link(first, dst)
            .map_err(|e| io_at(&format!("hardlink {} to", first.display()), dst, e))?;
        stats.hardlinks += 1;
    }
    // BTreeMap order puts every directory before its descendants: reversed, each directory
    // comes after all of its subdirectories.
    for (entry, dst) in dirs.iter().rev() {
        apply_meta(&entry.meta, dst, opts)?;
    }
    Ok(stats)
}

/// Files at least this big have their device writes started as soon as they are copied;
/// for smaller ones the extra system call costs more than the overlap gains.
const WRITEBACK_EARLY: u64 = 256 << 10;

/// Below this many entries a copy stays on one thread: starting threads costs more than the
/// few files gain (a commit copies about a hundred).
const PARALLEL_MIN_FILES: usize = 64;

/// Copy the non-directory entries `files` (each to its destination, whose parent exists),
/// on one thread per core for large sets: creating, writing and labelling small files is
/// mostly system-call latency, which overlaps well across cores.
fn copy_files(files: &[(&Entry, PathBuf)], opts: &CopyOpts, stats: &mut CopyStats) -> Result<()> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if workers == 1 || files.len() < PARALLEL_MIN_FILES {
        for (entry, dst) in files {
            copy_one(entry, dst, opts, stats)?;
        }
        return Ok(());
    }
    // Interleaved shares (not contiguous chunks) spread the big files, which cluster in a
    // few directories, over the workers.
    let unsupported = stats.reflink_unsupported;
    let results: Vec<Result<CopyStats>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || {
                    let mut st = CopyStats {
                        reflink_unsupported: unsupported,
                        ..CopyStats::default()
                    };
                    for (entry, dst) in files.iter().skip(w).step_by(workers) {
                        copy_one(entry, dst, opts, &mut st)?;
                    }
                    Ok(st)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("a copy worker only returns errors, never panics")
            })
            .collect()
    });
    for r in results {
        let st = r?;
        stats.files += st.files;
        stats.symlinks += st.symlinks;
        stats.specials += st.specials;
        stats.reflinked += st.reflinked;
        stats.shared += st.shared;
        stats.prestaged += st.prestaged;
        stats.bytes_copied += st.bytes_copied;
        stats.reflink_unsupported |= st.reflink_unsupported;
    }
    Ok(())
}

/// `scan_tree(src)` then `copy_tree` to `dst`.
pub fn copy_dir(src: &Path, dst: &Path, opts: &CopyOpts) -> Result<CopyStats> {
    let tree = scan_tree(src)?;
    copy_tree(&tree, dst, opts)
}

/// Copy one non-directory entry to `dst` (which must not exist), metadata included.
pub fn copy_entry(entry: &Entry, dst: &Path, opts: &CopyOpts) -> Result<()> {
    if entry.meta.is_dir() {
        return Err(Error::Backend {
            path: entry.src.clone(),
            message: "copy_entry copies non-directories only; use copy_tree".into(),
        });
    }
    let mut stats = CopyStats::default();
    copy_one(entry, dst, opts, &mut stats)
}

fn copy_one(entry: &Entry, dst: &Path, opts: &CopyOpts, stats: &mut CopyStats) -> Result<()> {
    let meta = &entry.meta;
    match meta.kind {
        Kind::Dir => {
            make_dir(dst)?;
            stats.dirs += 1;
        }
        Kind::File => {
            if let Some(staged) = opts.prestaged.as_ref().and_then(|p| p.take(entry)) {
                // The copy has the entry's data and metadata already (its inode only
                // moves: mtime and owner stay).
                match std::fs::rename(&staged, dst) {
                    Ok(()) => {
                        stats.files += 1;
                        stats.prestaged += 1;
                        return Ok(());
                    }
                    Err(_) => {
                        let _ = std::fs::remove_file(&staged);
                    }
                }
            }
            if let Some(layers) = &opts.link_from {
                if entry.src.starts_with(layers)
                    && (opts.link_marked || !has_overlay_xattrs(&entry.src))
                    && std::fs::hard_link(&entry.src, dst).is_ok()
                {
                    stats.shared += 1;
                    return Ok(());
                }
            }
            let out = copy_file_data(&entry.src, dst, opts, stats)?;
            stats.files += 1;
            // Through the open descriptor: no path lookup per call.
            return apply_meta_fd(meta, &out, dst, opts);
        }
        Kind::Symlink => {
            let target = match &meta.target {
                Some(t) => t.clone(),
                None => {
                    std::fs::read_link(&entry.src).map_err(|e| io_at("readlink", &entry.src, e))?
                }
            };
            std::os::unix::fs::symlink(&target, dst)
                .map_err(|e| io_at(&format!("symlink {} at", target.display()), dst, e))?;
            stats.symlinks += 1;
        }
        Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
            let (ft, rdev) = match meta.kind {
                Kind::Fifo => (FileType::Fifo, 0),
                Kind::Socket => (FileType::Socket, 0),
                Kind::CharDev => (FileType::CharacterDevice, meta.rdev),
                _ => (FileType::BlockDevice, meta.rdev),
            };
            rustix::fs::mknodat(CWD, dst, ft, Mode::from_raw_mode(0o600), rdev)
                .map_err(|e| errno_at("mknod", dst, e))?;
            stats.specials += 1;
        }
    }
    if meta.kind != Kind::Dir {
        apply_meta(meta, dst, opts)?;
    }
    Ok(())
}

/// Whether the file at `path` carries overlayfs bookkeeping (a file copied up by an overlay
/// and handed to a layer keeps its `overlay.origin`): a link would keep it, so such a file
/// is copied with its metadata as scanned, the bookkeeping left out. Unreadable counts as
/// carrying some.
fn has_overlay_xattrs(path: &Path) -> bool {
    super::scan::xattr_names(path).map_or(true, |names| {
        names.iter().any(|n| super::scan::is_overlay_xattr(n))
    })
}

fn make_dir(path: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| io_at("mkdir", path, e))
}

/// Open regular file `src` for reading, never through a symlink (see [`CopyOpts::beneath`]).
fn open_source(src: &Path, opts: &CopyOpts) -> Result<File> {
    open_regular(src, opts.beneath.as_deref())
}

/// Open regular file `src` for reading without blocking on a FIFO and without following a
/// symlink: at any component below `beneath` when `src` is below it (a tree a running box
/// may change), else at its last component.
pub(crate) fn open_regular(src: &Path, beneath: Option<&Path>) -> Result<File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let Some((root, rel)) = beneath.and_then(|root| Some((root, src.strip_prefix(root).ok()?)))
    else {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
            .open(src)
            .map_err(|e| io_at("open", src, e))?;
        return regular(file, src);
    };
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_at("open", root, e))?;
    let fd = rustix::fs::openat2(
        &dir,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| errno_at("open (no symlinks below the copied tree)", src, e))?;
    regular(File::from(fd), src)
}

/// `file` (opened without blocking) when it is a regular file. A running box can swap the
/// file it was listed as for a FIFO before it is opened: a blocking open would wait forever
/// for a writer (the capture, and the box's supervisor, stuck), so the open does not block
/// and anything but a regular file is refused as changed under the copy.
fn regular(file: File, src: &Path) -> Result<File> {
    let md = file.metadata().map_err(|e| io_at("fstat", src, e))?;
    if !md.file_type().is_file() {
        return Err(io_at(
            "copy",
            src,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not a regular file any more (changed while copied)",
            ),
        ));
    }
    // Reads of a regular file never block; the flag is cleared for clarity all the same.
    rustix::fs::fcntl_setfl(&file, rustix::fs::OFlags::empty())
        .map_err(|e| errno_at("fcntl", src, e))?;
    Ok(file)
}

/// Create `dst` with the content of regular file `src`: a reflink when allowed and
/// possible, otherwise the data segments (holes stay holes).
fn copy_file_data(src: &Path, dst: &Path, opts: &CopyOpts, stats: &mut CopyStats) -> Result<File> {
    let input = open_source(src, opts)?;
    let output = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dst)
        .map_err(|e| io_at("create", dst, e))?;
    if opts.reflink && !stats.reflink_unsupported {
        match rustix::fs::ioctl_ficlone(&output, &input) {
            Ok(()) => {
                stats.reflinked += 1;
                return Ok(output);
            }
            Err(Errno::XDEV | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOTTY) => {
                stats.reflink_unsupported = true;
            }
            Err(e) => return Err(errno_at("reflink to", dst, e)),
        }
    }
    let md = input.metadata().map_err(|e| io_at("fstat", src, e))?;
    let size = md.len();
    // A file with as many allocated bytes as its length has no holes: skip the probing.
    let dense = std::os::unix::fs::MetadataExt::blocks(&md).saturating_mul(512) >= size;
    let copied = copy_segments(&input, src, &output, dst, size, dense)?;
    stats.bytes_copied += copied;
    if copied >= WRITEBACK_EARLY {
        // Start the device writes of a big file now, so they overlap the rest of the copy
        // instead of all waiting for the flush that makes it durable. Only a hint: that
        // flush (or the caller's wait) reports any write error.
        let _ = agentbox_sys::writeback::start(&output);
    }
    // Only a trailing hole leaves the file shorter than it should be.
    if copied < size {
        output
            .set_len(size)
            .map_err(|e| io_at("truncate", dst, e))?;
    }
    Ok(output)
}

/// Copy the data segments of `input` (found with SEEK_DATA/SEEK_HOLE) into `output` at the
/// same offsets. Returns the number of bytes copied.
fn copy_segments(
    input: &File,
    src: &Path,
    output: &File,
    dst: &Path,
    size: u64,
    dense: bool,
) -> Result<u64> {
    let mut buf = vec![0u8; usize::try_from(size.clamp(1, 256 * 1024)).unwrap_or(256 * 1024)];
    let mut copied = 0u64;
    let mut pos = 0u64;
    while pos < size {
        if dense {
            let (start, end) = (0, size);
            copied += copy_range(input, src, output, dst, &mut buf, start, end)?;
            break;
        }
        let start = match rustix::fs::seek(input, SeekFrom::Data(pos)) {
            Ok(off) => off,
            Err(Errno::NXIO) => break,
            // No SEEK_DATA support: everything is data.
            Err(Errno::INVAL | Errno::OPNOTSUPP) if pos == 0 => 0,
            Err(e) => return Err(errno_at("seek data in", src, e)),
        };
        let end = match rustix::fs::seek(input, SeekFrom::Hole(start)) {
            Ok(off) => off.min(size),
            Err(Errno::INVAL | Errno::OPNOTSUPP | Errno::NXIO) => size,
            Err(e) => return Err(errno_at("seek hole in", src, e)),
        };
        copied += copy_range(input, src, output, dst, &mut buf, start, end)?;
        if end <= pos {
            break;
        }
        pos = end;
    }
    Ok(copied)
}

/// Copy bytes `[start, end)` of `input` to the same offsets of `output`; stops early (without
/// error) if the file shrank while being copied. Returns the bytes copied.
fn copy_range(
    input: &File,
    src: &Path,
    output: &File,
    dst: &Path,
    buf: &mut [u8],
    start: u64,
    end: u64,
) -> Result<u64> {
    let mut off = start;
    while off < end {
        let want = usize::try_from((end - off).min(buf.len() as u64))
            .expect("chunk is at most the buffer length");
        let n = input
            .read_at(&mut buf[..want], off)
            .map_err(|e| io_at("read", src, e))?;
        if n == 0 {
            break;
        }
        output
            .write_all_at(&buf[..n], off)
            .map_err(|e| io_at("write", dst, e))?;
        off += n as u64;
    }
    Ok(off - start)
}

/// [`apply_meta`] for a regular file, through its open descriptor `file` (created at
/// `dst`, named in errors): the same order, one system call each without a path lookup.
fn apply_meta_fd(meta: &Meta, file: &File, dst: &Path, opts: &CopyOpts) -> Result<()> {
    use xattr::FileExt as _;
    if let Err(e) = rustix::fs::fchown(
        file,
        Some(rustix::fs::Uid::from_raw(meta.uid)),
        Some(rustix::fs::Gid::from_raw(meta.gid)),
    ) {
        if !(e == Errno::PERM && opts.ignore_owner_errors) {
            return Err(errno_at(
                &format!("chown {}:{}", meta.uid, meta.gid),
                dst,
                e,
            ));
        }
    }
    for (name, value) in &meta.xattrs {
        if opts.xattr_filter.is_some_and(|keep| !keep(name)) {
            continue;
        }
        file.set_xattr(name, value)
            .map_err(|e| io_at(&format!("setxattr {name} on"), dst, e))?;
    }
    rustix::fs::fchmod(file, Mode::from_raw_mode(meta.perm))
        .map_err(|e| errno_at(&format!("chmod {:o}", meta.perm), dst, e))?;
    let times = meta.mtime_only();
    rustix::fs::futimens(file, &times).map_err(|e| errno_at("set mtime of", dst, e))?;
    Ok(())
}

/// Owner, xattrs, mode and mtime of `meta`, applied to `dst` (not following a symlink).
fn apply_meta(meta: &Meta, dst: &Path, opts: &CopyOpts) -> Result<()> {
    let is_link = meta.kind == Kind::Symlink;
    if let Err(e) = rustix::fs::chownat(
        CWD,
        dst,
        Some(rustix::fs::Uid::from_raw(meta.uid)),
        Some(rustix::fs::Gid::from_raw(meta.gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        let skip = e == Errno::PERM && opts.ignore_owner_errors;
        if !skip {
            return Err(errno_at(
                &format!("chown {}:{}", meta.uid, meta.gid),
                dst,
                e,
            ));
        }
    }
    for (name, value) in &meta.xattrs {
        if let Some(keep) = opts.xattr_filter {
            if !keep(name) {
                continue;
            }
        }
        // xattr::set does not follow symlinks.
        xattr::set(dst, name, value).map_err(|e| io_at(&format!("setxattr {name} on"), dst, e))?;
    }
    if !is_link {
        rustix::fs::chmodat(CWD, dst, Mode::from_raw_mode(meta.perm), AtFlags::empty())
            .map_err(|e| errno_at(&format!("chmod {:o}", meta.perm), dst, e))?;
    }
    let times = meta.mtime_only();
    rustix::fs::utimensat(CWD, dst, &times, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| errno_at("set mtime of", dst, e))?;
    Ok(())
}

#[cfg(test)]
mod fifo_tests {
    use super::*;

    #[test]
    fn a_fifo_in_place_of_a_file_is_refused_without_blocking() {
        let d = tempfile::tempdir().expect("tempdir");
        let fifo = d.path().join("ff");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        let beneath = CopyOpts {
            beneath: Some(d.path().to_owned()),
            ..CopyOpts::default()
        };
        for opts in [&CopyOpts::default(), &beneath] {
            let e = open_source(&fifo, opts).expect_err("a FIFO is not copied as a file");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        let file = d.path().join("f");
        std::fs::write(&file, "x").expect("write");
        assert!(open_source(&file, &beneath).is_ok());
    }
}
