//! The scan: a cheap hash of the tree's metadata, walked level by level in parallel, for
//! when inotify is unavailable and as a safety net.

use super::*;

/// Why listing a directory stopped.
pub(super) enum ListError {
    /// The directory vanished or is not a directory any more.
    Vanished,
    Failed(WatchError),
}

/// Calls `each(child, entry)` for every non-ignored entry of directory `abs` (whose path
/// relative to the root is `rel`), `child` being the entry's relative path. Entries that
/// vanish while being listed are skipped.
pub(super) fn list_dir(
    abs: &Path,
    rel: &Path,
    ignore: &IgnoreSet,
    mut each: impl FnMut(PathBuf, &fs_err::DirEntry) -> Result<(), WatchError>,
) -> Result<(), ListError> {
    let entries = match fs_err::read_dir(abs) {
        Ok(entries) => entries,
        Err(e) if vanished(&e) => return Err(ListError::Vanished),
        Err(source) => {
            return Err(ListError::Failed(WatchError::Io {
                path: abs.to_owned(),
                source,
            }))
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) if vanished(&e) => continue,
            Err(source) => {
                return Err(ListError::Failed(WatchError::Io {
                    path: abs.to_owned(),
                    source,
                }))
            }
        };
        let child = rel.join(entry.file_name());
        if ignore.is_ignored(&child) {
            continue;
        }
        each(child, &entry).map_err(ListError::Failed)?;
    }
    Ok(())
}

/// Levels with fewer directories than this are walked by the calling thread alone.
pub(super) const PARALLEL_LEVEL: usize = 16;

/// Visits the directories `start` and, level by level, the subdirectories `visit` returns
/// for each, collecting what `visit` returns besides. The directories of a level with at
/// least [`PARALLEL_LEVEL`] of them are shared among one thread per core (at most 8), each
/// taking the next unvisited one, since listing and `lstat` calls are most of the cost of a
/// big tree. The first error stops the walk and is returned.
pub(super) fn walk_levels<T, F>(start: Vec<PathBuf>, visit: F) -> Result<Vec<T>, WatchError>
where
    T: Send,
    F: Fn(&Path) -> Result<(Vec<PathBuf>, T), WatchError> + Sync,
{
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let mut out = Vec::new();
    let mut level = start;
    while !level.is_empty() {
        let mut next = Vec::new();
        if workers == 1 || level.len() < PARALLEL_LEVEL {
            for rel in &level {
                let (subdirs, t) = visit(rel)?;
                next.extend(subdirs);
                out.push(t);
            }
        } else {
            let cursor = AtomicUsize::new(0);
            let failed = AtomicBool::new(false);
            let (level, visit) = (&level, &visit);
            let (cursor, failed) = (&cursor, &failed);
            let results = std::thread::scope(|s| {
                let handles: Vec<_> = (0..workers)
                    .map(|_| {
                        s.spawn(move || {
                            let mut subdirs = Vec::new();
                            let mut ts = Vec::new();
                            while !failed.load(Ordering::Relaxed) {
                                let Some(rel) = level.get(cursor.fetch_add(1, Ordering::Relaxed))
                                else {
                                    break;
                                };
                                match visit(rel) {
                                    Ok((dirs, t)) => {
                                        subdirs.extend(dirs);
                                        ts.push(t);
                                    }
                                    Err(e) => {
                                        failed.store(true, Ordering::Relaxed);
                                        return Err(e);
                                    }
                                }
                            }
                            Ok((subdirs, ts))
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                    .collect::<Vec<_>>()
            });
            for result in results {
                let (subdirs, ts) = result?;
                next.extend(subdirs);
                out.extend(ts);
            }
        }
        level = next;
    }
    Ok(out)
}

/// A cheap fingerprint of the tree under `root`, for the periodic backstop scan: it changes
/// when any non-ignored entry is created, deleted, renamed, written, or has its metadata
/// changed, and stays the same otherwise.
///
/// It hashes, for every non-ignored entry (never following symlinks, reading metadata with
/// `lstat` only, never file contents): its relative path, inode number and mode, plus
/// size, mtime and ctime (to the nanosecond) for non-directories, and owner for directories
/// (the root included).
/// A directory's own size and times are left out on purpose: they change whenever an
/// ignored entry inside it is created or removed, and every change of a non-ignored entry
/// already shows in that entry's own path or metadata.
///
/// The value is stable within one build of the program (it uses the standard library's
/// hasher with fixed keys); do not store it across upgrades. Entries that vanish during the
/// walk are skipped; a root that cannot be read is an error.
pub fn fingerprint(root: &Path, ignore: &IgnoreSet) -> Result<u64, WatchError> {
    // Order-independent combination (a wrapping sum of per-entry hashes), so the order in
    // which the (parallel) walk visits entries does not matter.
    let sums = walk_levels(vec![PathBuf::new()], |rel: &Path| {
        let abs = root.join(rel);
        let (mut sum, mut entries) = (0u64, 0u64);
        let mut subdirs = Vec::new();
        let listed = list_dir(&abs, rel, ignore, |child, entry| {
            // `DirEntry::metadata` is an lstat relative to the open directory.
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(e) if vanished(&e) => return Ok(()),
                Err(source) => {
                    return Err(WatchError::Io {
                        path: entry.path(),
                        source,
                    })
                }
            };
            sum = sum.wrapping_add(entry_hash(&child, &meta));
            entries += 1;
            if meta.is_dir() {
                subdirs.push(child);
            }
            Ok(())
        });
        match listed {
            Ok(()) => Ok((subdirs, (sum, entries))),
            Err(ListError::Vanished) if !rel.as_os_str().is_empty() => Ok((Vec::new(), (0, 0))),
            Err(ListError::Vanished) => Err(WatchError::Io {
                path: abs,
                source: io::ErrorKind::NotFound.into(),
            }),
            Err(ListError::Failed(e)) => Err(e),
        }
    })?;
    let (sum, entries) = sums.into_iter().fold((0u64, 0u64), |(s, n), (ds, dn)| {
        (s.wrapping_add(ds), n + dn)
    });
    // The root's own identity and permissions (a chmod of the box's `/` lands there).
    let top = fs_err::metadata(root).map_err(|source| WatchError::Io {
        path: root.to_owned(),
        source,
    })?;
    let mut total = DefaultHasher::new();
    (sum, entries, entry_hash(Path::new(""), &top)).hash(&mut total);
    Ok(total.finish())
}

pub(super) fn entry_hash(rel: &Path, meta: &std::fs::Metadata) -> u64 {
    let mut h = DefaultHasher::new();
    rel.as_os_str().as_bytes().hash(&mut h);
    (meta.ino(), meta.mode()).hash(&mut h);
    if meta.is_dir() {
        (meta.uid(), meta.gid()).hash(&mut h);
    } else {
        (
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        )
            .hash(&mut h);
    }
    h.finish()
}
