//! A walk of a directory tree that reads one `lstat` per entry and nothing else (no xattrs,
//! no link targets, no content), on one thread per core once the tree is wide enough.
//!
//! Why threads: a running box's upper directory keeps every file the box wrote since it
//! started (an `npm install` leaves tens of thousands), and every captured command walks it
//! to find what changed. That walk is system-call latency (`getdents`, `statx`), which
//! overlaps well across cores.
//!
//! Semantics are those of a plain recursive walk: symlinks are never followed, directories
//! on other filesystems below the root are entered, the first error ends the walk. The
//! tree may be a running box's, changing while it is walked: each directory is opened
//! beneath the root without following a symlink on the way (`openat2`), so one the box
//! swapped for a symlink after its parent was read is never listed through it; such a
//! directory, or one removed meanwhile, is skipped (its entry reports what the parent's
//! listing saw), as is an entry removed between the listing and its `lstat`.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::fs::{AtFlags, Statx, StatxFlags};

use super::io_at;
use crate::Result;

/// The walk goes on one thread until one level of the tree has at least this many
/// directories; they are then shared out among the workers. Smaller trees never start a
/// thread (a commit of a fresh box's upper directory walks a few hundred entries).
const SPLIT_DIRS: usize = 64;

/// What the walk reads of each entry: `statx` with the basic fields and the birth time.
pub const WALK_STATX: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

/// `statx` of `name` in directory `dir` (the directory itself for `""`), never following a
/// symlink.
fn statx_at(dir: &rustix::fd::OwnedFd, name: &std::ffi::CStr) -> rustix::io::Result<Statx> {
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    rustix::fs::statx(dir, name, flags, WALK_STATX)
}

/// Whether a `statx` result is a directory.
fn is_dir(st: &Statx) -> bool {
    rustix::fs::FileType::from_raw_mode(u32::from(st.stx_mode)) == rustix::fs::FileType::Directory
}

/// Every entry below `root`, the root itself included as the empty path, with its `lstat`
/// metadata (`statx`, see [`WALK_STATX`]); in no particular order.
pub fn lstat_tree(root: &Path) -> Result<Vec<(PathBuf, Statx)>> {
    let md = rustix::fs::statx(rustix::fs::CWD, root, AtFlags::SYMLINK_NOFOLLOW, WALK_STATX)
        .map_err(|e| io_at("lstat", root, e.into()))?;
    if !is_dir(&md) {
        return Ok(vec![(PathBuf::new(), md)]);
    }
    let root_fd = rustix::fs::open(
        root,
        rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io_at("open", root, e.into()))?;
    walk_from(root, &root_fd, md)
}

/// [`lstat_tree`] of the directory `base/rel`, where `rel` is untrusted (a path in a box's
/// tree): it is looked up beneath `base` without following a symlink, and if it is not a
/// directory reached that way (any more), the walk finds nothing.
pub fn lstat_tree_beneath(base: &Path, rel: &Path) -> Result<Vec<(PathBuf, Statx)>> {
    let shown = base.join(rel);
    let root_fd = match super::scan::open_dir_beneath(base, rel) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_at("open", &shown, e)),
    };
    let md = statx_at(&root_fd, c"").map_err(|e| io_at("lstat", &shown, e.into()))?;
    walk_from(&shown, &root_fd, md)
}

/// The walk of the directory `root` (opened as `root_fd`, its metadata `md`).
fn walk_from(
    root: &Path,
    root_fd: &rustix::fd::OwnedFd,
    md: Statx,
) -> Result<Vec<(PathBuf, Statx)>> {
    let mut out = vec![(PathBuf::new(), md)];
    // Breadth first on this thread until a level is wide enough to share.
    let mut level = vec![PathBuf::new()];
    while !level.is_empty() && level.len() < SPLIT_DIRS {
        let mut next = Vec::new();
        for dir in &level {
            read_level(root, root_fd, dir, &mut out, &mut next)?;
        }
        level = next;
    }
    if level.is_empty() {
        return Ok(out);
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let taken = AtomicUsize::new(0);
    let level = &level;
    let results: Vec<Result<Vec<(PathBuf, Statx)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut found = Vec::new();
                    // Subtrees differ wildly in size (one `node_modules` beside a few
                    // source directories): each worker takes the next one when it is done.
                    loop {
                        let i = taken.fetch_add(1, Ordering::Relaxed);
                        let Some(start) = level.get(i) else {
                            return Ok(found);
                        };
                        let mut stack = vec![start.clone()];
                        while let Some(dir) = stack.pop() {
                            read_level(root, root_fd, &dir, &mut found, &mut stack)?;
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("a walk worker only returns errors, never panics")
            })
            .collect()
    });
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// Read directory `root/dir` (`root_fd` is `root`): its entries (relative to `root`) into
/// `out`, its subdirectories into `dirs`. A directory that is gone or is no directory
/// any more (see the module doc) adds nothing, nor does an entry gone before its `lstat`.
fn read_level(
    root: &Path,
    root_fd: &rustix::fd::OwnedFd,
    dir: &Path,
    out: &mut Vec<(PathBuf, Statx)>,
    dirs: &mut Vec<PathBuf>,
) -> Result<()> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let abs = root.join(dir);
    let gone = |e: rustix::io::Errno| {
        e == rustix::io::Errno::NOENT
            || e == rustix::io::Errno::NOTDIR
            || e == rustix::io::Errno::LOOP
            || e == rustix::io::Errno::XDEV
    };
    // Relative to the root, every component without following a symlink: a path the box
    // changed since its parent was read is not walked through what replaced it.
    let at = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let fd = match rustix::fs::openat2(
        root_fd,
        at,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(e) if gone(e) && !dir.as_os_str().is_empty() => return Ok(()),
        Err(e) => return Err(io_at("open", &abs, e.into())),
    };
    let stat_fd =
        rustix::io::fcntl_dupfd_cloexec(&fd, 0).map_err(|e| io_at("open", &abs, e.into()))?;
    let mut entries =
        rustix::fs::Dir::new(fd).map_err(|e| io_at("read directory", &abs, e.into()))?;
    while let Some(item) = entries.read() {
        let item = item.map_err(|e| io_at("read directory", &abs, e.into()))?;
        let name = item.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let rel = dir.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let md = match statx_at(&stat_fd, name) {
            Ok(md) => md,
            Err(e) if e == rustix::io::Errno::NOENT => continue,
            Err(e) => return Err(io_at("lstat", &root.join(&rel), e.into())),
        };
        if is_dir(&md) {
            dirs.push(rel.clone());
        }
        out.push((rel, md));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Every entry, with its inode, as a plain sequential walk (walkdir) sees it.
    fn walkdir_view(root: &Path) -> BTreeMap<PathBuf, u64> {
        use std::os::unix::fs::MetadataExt;
        walkdir::WalkDir::new(root)
            .follow_links(false)
            .into_iter()
            .map(|e| {
                let e = e.expect("walkable");
                let rel = e.path().strip_prefix(root).expect("below root").to_owned();
                (rel, e.metadata().expect("lstat").ino())
            })
            .collect()
    }

    fn view(root: &Path) -> BTreeMap<PathBuf, u64> {
        let all = lstat_tree(root).expect("walk");
        let n = all.len();
        let map: BTreeMap<PathBuf, u64> = all.into_iter().map(|(p, m)| (p, m.stx_ino)).collect();
        assert_eq!(map.len(), n, "an entry was reported twice");
        map
    }

    #[test]
    fn a_narrow_tree_and_a_wide_one_are_walked_whole() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path();
        // Narrow: walked on this thread alone.
        std::fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
        std::fs::write(root.join("a/b/c/f"), "x").expect("write");
        std::os::unix::fs::symlink("a/b", root.join("link")).expect("symlink");
        assert_eq!(view(root), walkdir_view(root));
        // Wide: levels of more than SPLIT_DIRS directories, shared out among workers.
        for i in 0..150 {
            let d = root.join(format!("wide/p{i}/lib"));
            std::fs::create_dir_all(&d).expect("mkdir");
            for j in 0..(i % 7) {
                std::fs::write(d.join(format!("f{j}")), "y").expect("write");
            }
            std::os::unix::fs::symlink("..", d.join("up")).expect("symlink");
        }
        std::fs::create_dir_all(root.join("wide/p3/lib/deep/er/still")).expect("mkdir");
        let seen = view(root);
        assert_eq!(seen, walkdir_view(root));
        assert!(seen.contains_key(Path::new("wide/p3/lib/deep/er/still")));
        assert!(seen.contains_key(Path::new("")));
    }

    /// What a box can do between a directory's listing and the walk into it: swap it
    /// (or a directory above it) for a symlink to a directory of the host.
    #[test]
    fn a_directory_swapped_for_a_symlink_is_never_listed_through_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let (root, host) = (t.path().join("root"), t.path().join("host"));
        std::fs::create_dir_all(host.join("b")).expect("mkdir");
        std::fs::write(host.join("secret"), "host").expect("write");
        std::fs::write(host.join("b/secret"), "host").expect("write");
        std::fs::create_dir_all(root.join("real")).expect("mkdir");
        std::os::unix::fs::symlink(&host, root.join("a")).expect("symlink");
        let root_fd = rustix::fs::open(
            &root,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .expect("open root");
        for dir in ["a", "a/b", "real/../a"] {
            let (mut out, mut dirs) = (Vec::new(), Vec::new());
            read_level(&root, &root_fd, Path::new(dir), &mut out, &mut dirs).expect("read");
            assert!(out.is_empty() && dirs.is_empty(), "{dir}: {out:?}");
        }
        // A walk that starts below the root does not start through one either.
        for dir in ["a", "a/b", "real/../a"] {
            let walked = lstat_tree_beneath(&root, Path::new(dir)).expect("walk");
            assert!(walked.is_empty(), "{dir}: {walked:?}");
        }
        // A plain directory is listed as before.
        std::fs::write(root.join("real/f"), "x").expect("write");
        let walked: Vec<PathBuf> = lstat_tree_beneath(&root, Path::new("real"))
            .expect("walk")
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(walked, [PathBuf::new(), PathBuf::from("f")]);
        let (mut out, mut dirs) = (Vec::new(), Vec::new());
        read_level(&root, &root_fd, Path::new("real"), &mut out, &mut dirs).expect("read");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Path::new("real/f"));
    }

    #[test]
    fn a_file_root_is_itself_and_a_missing_root_names_its_path() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("file");
        std::fs::write(&f, "z").expect("write");
        let all = lstat_tree(&f).expect("walk");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].0, PathBuf::new());
        let missing = t.path().join("missing");
        let err = lstat_tree(&missing).expect_err("missing root");
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
