//! A recursive inotify watcher of the box's upper directory.

use super::*;

/// What [`Watcher::poll`] saw since the previous call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Events about non-ignored paths, plus the non-ignored entries found inside
    /// directories that appeared (created or moved in) since the previous call. A count of
    /// events, not of distinct paths: one write is typically two (MODIFY, CLOSE_WRITE).
    pub changed: usize,
    /// The kernel's event queue overflowed: events were lost, so the tree changed by an
    /// unknown amount. The watcher has re-added its watches by rescanning the tree.
    pub overflowed: bool,
}

impl Seen {
    /// Whether anything changed (a count, or an overflow standing for unknown changes).
    pub fn any(&self) -> bool {
        self.changed > 0 || self.overflowed
    }
}

/// One event copied out of the read buffer.
pub(super) struct RawEvent {
    wd: i32,
    mask: EventMask,
    name: Option<OsString>,
}

/// Size of the buffer events are read into (a read returns as many whole events as fit).
pub(super) const READ_BUFFER: usize = 64 * 1024;

/// At most this many reads per [`Watcher::poll`], so a storm of events cannot keep one call
/// busy forever; what is left is returned by the next call.
pub(super) const MAX_READS_PER_POLL: usize = 64;

/// The most watches one box's watcher holds, whatever the box does: an eighth of the host
/// user's limit (`fs.inotify.max_user_watches`; every watch of a supervisor counts against
/// its user, host root for a root box), at most [`MAX_WATCHES_CEILING`] and at least
/// [`MAX_WATCHES_FLOOR`]. An eighth leaves the host's own tools (editors, file managers,
/// other boxes) most of the limit with several busy boxes running; the ceiling covers a
/// large `node_modules` (tens of thousands of directories) while keeping the memory a box
/// can pin in the kernel (about 1 KiB per watch) small. Beyond it the watcher fails with
/// [`WatchError::TooManyDirs`] and the box's changes are found by scanning.
pub fn max_watches() -> usize {
    let limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(8192);
    (limit / 8).clamp(MAX_WATCHES_FLOOR, MAX_WATCHES_CEILING)
}

/// See [`max_watches`].
pub const MAX_WATCHES_CEILING: usize = 32_768;
/// See [`max_watches`].
pub const MAX_WATCHES_FLOOR: usize = 1024;

/// Events that mean "something in this directory changed". Reads and opens are left out
/// (a write through a shared mapping raises nothing until the file is closed: whoever
/// trusts a [`Journal`] must look at the files held open then, see `crate::held_files`).
pub(super) fn change_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::EXCL_UNLINK
        | WatchMask::ONLYDIR
}

/// Recursive inotify watcher of one directory tree.
///
/// Invariants:
/// * every directory under the root that is not ignored has a watch, except one created
///   since the last [`poll`](Watcher::poll) (it gets its watch, and its contents are counted
///   as changes, when that event is processed) or after the watch limit or the watcher's
///   cap was hit (which is an error: the caller must stop relying on the watcher);
/// * it never holds more than `cap` watches ([`max_watches`] unless a test says otherwise),
///   counting those a walk added before it failed (they live until the watcher is dropped,
///   and are not in `dirs`): so once [`poll`](Watcher::poll) failed, every later call fails
///   the same way without reading an event or adding a watch (`broken`). A watcher shared
///   by several readers may be polled again before its owner drops it; counting from
///   `dirs` then, each such poll would add the failed walk's watches once more;
/// * `dirs` maps each live watch to the directory's current path relative to the root:
///   a directory moved inside the tree is re-watched under its new path, one moved out of
///   the tree (or into an ignored path) loses its watches;
/// * ignored directories are never watched, and symlinks are never followed.
pub struct Watcher {
    root: PathBuf,
    ignore: IgnoreSet,
    /// Kept by a recording watcher: every path with an event.
    journal: Option<Journal>,
    inotify: Inotify,
    /// Watch descriptor id → (descriptor, directory path relative to the root).
    dirs: HashMap<i32, (WatchDescriptor, PathBuf)>,
    root_wd: i32,
    buffer: Vec<u8>,
    /// The most watches this watcher adds (see [`max_watches`]).
    cap: usize,
    /// The error that ended this watcher, returned again by every later poll.
    broken: Option<WatchError>,
}

impl std::os::fd::AsFd for Watcher {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("root", &self.root)
            .field("watches", &self.dirs.len())
            .finish_non_exhaustive()
    }
}

impl Watcher {
    /// Watches `root` and every directory below it that `ignore` does not ignore.
    ///
    /// Safe against a tree changing meanwhile: each directory gets its watch before it is
    /// listed, so an entry created after the listing raises an event and one created before
    /// is in the listing; directories that vanish (or are replaced by files) during the walk
    /// are skipped. The directories of one depth are shared among one thread per core.
    /// Fails with [`WatchError::WatchLimit`] when the inotify watch limit is reached; the
    /// caller then uses [`fingerprint`] polling instead.
    /// Fails with [`WatchError::TooManyDirs`] when the tree has more than [`max_watches`]
    /// directories to watch.
    pub fn new(root: &Path, ignore: IgnoreSet) -> Result<Watcher, WatchError> {
        Watcher::build(root, ignore, None, max_watches())
    }

    fn build(
        root: &Path,
        ignore: IgnoreSet,
        journal: Option<Journal>,
        cap: usize,
    ) -> Result<Watcher, WatchError> {
        let inotify = Inotify::init().map_err(|source| WatchError::Init {
            path: root.to_owned(),
            source,
        })?;
        let mut watcher = Watcher {
            root: root.to_owned(),
            ignore,
            journal,
            inotify,
            dirs: HashMap::new(),
            root_wd: -1,
            buffer: vec![0; READ_BUFFER],
            cap,
            broken: None,
        };
        watcher.watch_root()?;
        watcher.watch_dirs(vec![PathBuf::new()], false)?;
        Ok(watcher)
    }

    /// A watcher that also records every path of the tree with an event ([`Journal`]),
    /// ignored or not: ignored directories are watched too (their events still count
    /// as no change).
    pub fn recording(root: &Path, ignore: IgnoreSet) -> Result<Watcher, WatchError> {
        Watcher::build(root, ignore, Some(Journal::default()), max_watches())
    }

    /// A recording watcher holding at most `cap` watches (tests of the cap).
    pub fn recording_capped(
        root: &Path,
        ignore: IgnoreSet,
        cap: usize,
    ) -> Result<Watcher, WatchError> {
        Watcher::build(root, ignore, Some(Journal::default()), cap)
    }

    /// Whether events are waiting to be read.
    pub fn pending(&self) -> Result<bool, WatchError> {
        self.wait(Duration::ZERO)
    }

    /// The paths a recording watcher saw events for (`None` for a plain one).
    pub fn journal(&mut self) -> Option<&mut Journal> {
        self.journal.as_mut()
    }

    /// What decides which directories are watched: nothing for a recording watcher.
    fn pruned(&self) -> IgnoreSet {
        if self.journal.is_some() {
            IgnoreSet::none()
        } else {
            self.ignore.clone()
        }
    }

    /// The watched directory, as given to [`Watcher::new`].
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many directories are watched (the root included).
    pub fn watch_count(&self) -> usize {
        self.dirs.len()
    }

    /// Blocks up to `timeout` until events arrive, then returns what was seen since the
    /// previous call (possibly nothing, after a timeout or when only ignored paths changed).
    ///
    /// New directories get watches, and their current contents count as changes (events
    /// inside them before the watch existed were missed). On a queue overflow
    /// (`IN_Q_OVERFLOW`) the watches are re-added by rescanning the tree and `overflowed` is
    /// set. Errors: [`WatchError::WatchLimit`] when a new directory cannot be watched,
    /// [`WatchError::TooManyDirs`] when it would be one watch more than the cap,
    /// [`WatchError::RootGone`] when the root was removed, moved or unmounted (as when a
    /// checkout replaces the layer: build a new watcher on the new one). After an error the
    /// watcher no longer covers the whole tree: drop it, and fall back to [`fingerprint`]
    /// polling (or build a new watcher).
    ///
    /// Once it failed, it fails again with the same error at every call, adding nothing.
    pub fn poll(&mut self, timeout: Duration) -> Result<Seen, WatchError> {
        if let Some(e) = &self.broken {
            return Err(e.again());
        }
        let polled = self.poll_events(timeout);
        if let Err(e) = &polled {
            self.broken = Some(e.again());
        }
        polled
    }

    /// [`Watcher::poll`] of a watcher that has not failed.
    fn poll_events(&mut self, timeout: Duration) -> Result<Seen, WatchError> {
        let mut seen = Seen::default();
        if !self.wait(timeout)? {
            return Ok(seen);
        }
        for _ in 0..MAX_READS_PER_POLL {
            let batch = match self.read_batch()? {
                Some(batch) => batch,
                None => break,
            };
            let mut appeared = Vec::new();
            self.process(batch, &mut seen, &mut appeared)?;
            seen.changed += self.watch_dirs(appeared, true)?;
        }
        if seen.overflowed {
            self.rescan()?;
        }
        Ok(seen)
    }

    /// Waits until the inotify descriptor is readable or `timeout` passed; true if readable.
    pub(super) fn wait(&self, timeout: Duration) -> Result<bool, WatchError> {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let deadline = Instant::now().checked_add(timeout);
        loop {
            // `None` (block without limit) only for timeouts too large to represent.
            let limit = match deadline {
                Some(d) => Timespec::try_from(d.saturating_duration_since(Instant::now())).ok(),
                None => None,
            };
            let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
            match rustix::event::poll(&mut fds, limit.as_ref()) {
                Ok(n) => return Ok(n > 0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(WatchError::Events {
                        path: self.root.clone(),
                        source: e.into(),
                    })
                }
            }
        }
    }

    /// One non-blocking read of events; `None` when the queue is empty.
    pub(super) fn read_batch(&mut self) -> Result<Option<Vec<RawEvent>>, WatchError> {
        loop {
            match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => {
                    return Ok(Some(
                        events
                            .map(|e| RawEvent {
                                wd: e.wd.get_watch_descriptor_id(),
                                mask: e.mask,
                                name: e.name.map(|n| n.to_owned()),
                            })
                            .collect(),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(WatchError::Events {
                        path: self.root.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Counts the non-ignored events of `batch` into `seen`, keeps the watch table in step
    /// with directory removals and moves, and collects the directories that appeared.
    pub(super) fn process(
        &mut self,
        batch: Vec<RawEvent>,
        seen: &mut Seen,
        appeared: &mut Vec<PathBuf>,
    ) -> Result<(), WatchError> {
        // A batch is mostly events in a few directories: their answers are remembered.
        let ignore = self.ignore.clone();
        let mut ignore = ignore.memo();
        for event in batch {
            if event.mask.contains(EventMask::Q_OVERFLOW) {
                seen.overflowed = true;
                if let Some(j) = &mut self.journal {
                    // Numbered like an event, so it is after every snapshot already taken.
                    j.seq += 1;
                    j.lost = Some(j.seq);
                }
                continue;
            }
            let root_event = event.wd == self.root_wd;
            if event.mask.contains(EventMask::IGNORED) {
                // The watch is gone: its directory was deleted, unmounted, or we removed it.
                self.dirs.remove(&event.wd);
                if root_event {
                    return Err(self.root_gone());
                }
                continue;
            }
            if root_event
                && event
                    .mask
                    .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::UNMOUNT)
            {
                return Err(self.root_gone());
            }
            // Events of a watch we dropped (its directory moved away) are stale.
            let Some((_, dir)) = self.dirs.get(&event.wd) else {
                continue;
            };
            if event
                .mask
                .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::UNMOUNT)
            {
                // The parent directory's watch reports the same change by name.
                continue;
            }
            let rel = match &event.name {
                Some(name) => dir.join(name),
                // A change of the watched directory itself (chmod, xattr).
                None => {
                    let dir = dir.clone();
                    if let Some(j) = &mut self.journal {
                        j.record(dir.clone());
                    }
                    if !ignore.is_ignored(&dir) {
                        seen.changed += 1;
                    }
                    continue;
                }
            };
            if let Some(j) = &mut self.journal {
                // A directory that appeared or went at this path moves every path below it
                // (see [`Journal::last_move`]).
                let moved = event.mask.contains(EventMask::ISDIR)
                    && event.mask.intersects(
                        EventMask::CREATE
                            | EventMask::DELETE
                            | EventMask::MOVED_FROM
                            | EventMask::MOVED_TO,
                    );
                j.record(rel.clone());
                if moved {
                    j.moved(&rel);
                }
            }
            let ignored = ignore.is_ignored(&rel);
            if ignored && self.journal.is_none() {
                continue;
            }
            if !ignored {
                seen.changed += 1;
            }
            if event.mask.contains(EventMask::ISDIR) {
                if event.mask.contains(EventMask::MOVED_FROM) {
                    self.forget_subtree(&rel);
                }
                if event
                    .mask
                    .intersects(EventMask::CREATE | EventMask::MOVED_TO)
                {
                    appeared.push(rel);
                }
            }
        }
        Ok(())
    }

    pub(super) fn root_gone(&self) -> WatchError {
        WatchError::RootGone {
            path: self.root.clone(),
        }
    }

    /// Drops the watches of `rel` and every directory below it (it moved away; if it moved
    /// to a non-ignored place inside the tree, the `MOVED_TO` event re-watches it there).
    pub(super) fn forget_subtree(&mut self, rel: &Path) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, (_, path))| path.starts_with(rel))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            if let Some((descriptor, _)) = self.dirs.remove(&wd) {
                // EINVAL when the kernel already dropped it: nothing left to do either way.
                let _ = self.inotify.watches().remove(descriptor);
            }
        }
    }

    /// Adds the root's watch; unlike other directories, the root vanishing is an error.
    pub(super) fn watch_root(&mut self) -> Result<(), WatchError> {
        // The root may be given through a symlink, so it is the one watch that follows one.
        match self.inotify.watches().add(&self.root, change_mask()) {
            Ok(wd) => {
                self.root_wd = wd.get_watch_descriptor_id();
                self.dirs.insert(self.root_wd, (wd, PathBuf::new()));
                Ok(())
            }
            Err(e) => Err(add_error(&self.root, e)),
        }
    }

    /// Watches each directory of `todo` (relative paths) and every non-ignored directory
    /// below it. A directory's watch is added before the directory is listed (see
    /// [`Watcher::new`]); directories that vanish meanwhile are skipped. Returns the number
    /// of non-ignored entries found below the `todo` directories when `count` is set.
    ///
    /// The root (the empty path) is listed but not watched here: see `watch_root`.
    pub(super) fn watch_dirs(
        &mut self,
        todo: Vec<PathBuf>,
        count: bool,
    ) -> Result<usize, WatchError> {
        if todo.is_empty() {
            return Ok(0);
        }
        let mask = change_mask() | WatchMask::DONT_FOLLOW;
        let watches = self.inotify.watches();
        let pruned = self.pruned();
        let (root, ignore, counted) = (&self.root, &pruned, &self.ignore);
        // Watches held and added so far, shared by the walk's threads: the cap is checked
        // before each add, so the kernel never holds more than `cap` of this watcher's.
        // (Re-adding a watched directory counts too: an overestimate, never an under.)
        let held = std::sync::atomic::AtomicUsize::new(self.dirs.len());
        let cap = self.cap;
        let visited = walk_levels(todo, |rel: &Path| {
            let abs = root.join(rel);
            let watch = if rel.as_os_str().is_empty() {
                None
            } else {
                if held.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= cap {
                    return Err(WatchError::TooManyDirs {
                        path: root.clone(),
                        cap,
                    });
                }
                match watches.clone().add(&abs, mask) {
                    Ok(wd) => Some((wd, rel.to_owned())),
                    Err(e) if vanished(&e) => return Ok((Vec::new(), (None, 0))),
                    Err(e) => return Err(add_error(&abs, e)),
                }
            };
            let mut subdirs = Vec::new();
            let mut found = 0;
            let listed = list_dir(&abs, rel, ignore, |child, entry| {
                if !counted.is_ignored(&child) {
                    found += 1;
                }
                match entry.file_type() {
                    Ok(kind) if kind.is_dir() => subdirs.push(child),
                    Ok(_) => {}
                    Err(e) if vanished(&e) => {}
                    Err(source) => {
                        return Err(WatchError::Io {
                            path: entry.path(),
                            source,
                        })
                    }
                }
                Ok(())
            });
            match listed {
                Ok(()) => Ok((subdirs, (watch, found))),
                // Gone after its watch was added: the watch goes with it (IN_IGNORED).
                Err(ListError::Vanished) => Ok((Vec::new(), (watch, 0))),
                Err(ListError::Failed(e)) => Err(e),
            }
        })?;
        let mut found = 0;
        for (watch, n) in visited {
            if let Some((wd, rel)) = watch {
                self.dirs.insert(wd.get_watch_descriptor_id(), (wd, rel));
            }
            found += n;
        }
        Ok(if count { found } else { 0 })
    }

    /// After a queue overflow: watches every directory of the tree again (an inode already
    /// watched keeps its descriptor, under its current path) and drops the watches of
    /// directories no longer in the tree.
    pub(super) fn rescan(&mut self) -> Result<(), WatchError> {
        let old = std::mem::take(&mut self.dirs);
        self.watch_root()?;
        self.watch_dirs(vec![PathBuf::new()], false)?;
        for (wd, (descriptor, _)) in old {
            if !self.dirs.contains_key(&wd) {
                let _ = self.inotify.watches().remove(descriptor);
            }
        }
        Ok(())
    }
}

/// Maps an `inotify_add_watch` failure to an error (ENOSPC: the watch limit).
pub(super) fn add_error(path: &Path, source: io::Error) -> WatchError {
    if source.raw_os_error() == Some(libc::ENOSPC) {
        WatchError::WatchLimit {
            path: path.to_owned(),
        }
    } else {
        WatchError::Watch {
            path: path.to_owned(),
            source,
        }
    }
}
