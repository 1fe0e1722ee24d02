//! Change detection for auto-capture.
//!
//! Everything a box changes lands in one host directory tree: its overlayfs upper directory,
//! or the btrfs subvolume used as the upper. The per-box supervisor decides when to snapshot
//! that tree with the pieces of this module:
//!
//! * [`Watcher`] — a recursive inotify watcher of the tree. It costs nothing while the box
//!   is idle (no walking) and reports how many changes it saw since the previous call.
//! * [`IgnoreSet`] — paths whose changes never trigger a capture (caches, temp files, logs).
//! * [`Debouncer`] — the pure decision: capture once changes have settled for a quiet
//!   period, and never later than a maximum delay after the first unsaved change.
//! * [`fingerprint`] — a cheap hash of the tree's metadata, compared on a timer when inotify
//!   is unavailable (the watcher could not be built or failed, e.g. the watch limit
//!   `fs.inotify.max_user_watches` was hit) or as an occasional safety net.
//!
//! A supervisor loop looks like:
//!
//! ```no_run
//! # use std::time::{Duration, Instant};
//! # use agentbox_boxes::watch::{Debouncer, IgnoreSet, Watcher};
//! # fn capture() {}
//! # fn main() -> Result<(), agentbox_boxes::watch::WatchError> {
//! let ignore = IgnoreSet::new(&IgnoreSet::default_patterns());
//! let mut watcher = Watcher::new("/path/to/upper".as_ref(), ignore)?;
//! let mut debounce = Debouncer::default();
//! loop {
//!     let timeout = debounce
//!         .next_deadline()
//!         .map_or(Duration::from_secs(60), |d| d.saturating_duration_since(Instant::now()));
//!     if watcher.poll(timeout)?.any() {
//!         debounce.change(Instant::now());
//!     }
//!     if debounce.due(Instant::now()) {
//!         let started = Instant::now();
//!         capture();
//!         debounce.captured(started);
//!     }
//! }
//! # }
//! ```
//!
//! Writes made through an overlayfs mount reach the upper directory through the VFS, so they
//! raise inotify events on the upper directory's watches like local writes do; the
//! `overlay_writes_*` tests check every kind of change (new file, append, copy-up, whiteout,
//! new directory, chmod) on the running kernel.

use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

/// Why watching or fingerprinting a tree failed. Every variant names the path involved.
///
/// When a [`Watcher`] fails, the caller falls back to comparing [`fingerprint`]s on a timer.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// `inotify_init1` failed (typically EMFILE: `fs.inotify.max_user_instances` reached).
    #[error(
        "cannot start watching {path} for changes: {source}; raise the sysctl \
         fs.inotify.max_user_instances if the limit of inotify instances was reached. \
         Changes are detected by the periodic backstop scan instead"
    )]
    Init {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `inotify_add_watch` failed with ENOSPC: the per-user watch limit is reached.
    #[error(
        "cannot watch {path} for changes: the inotify watch limit is reached; raise it with \
         `sysctl fs.inotify.max_user_watches=1048576` (persist it in /etc/sysctl.d/). \
         Changes are detected by the periodic backstop scan instead"
    )]
    WatchLimit { path: PathBuf },
    /// `inotify_add_watch` failed for another reason than the directory vanishing.
    #[error("cannot watch {path} for changes: {source}")]
    Watch {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Reading a directory or an entry's metadata failed (not because it vanished).
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Waiting for or reading inotify events failed.
    #[error("cannot read change events of {path}: {source}")]
    Events {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The watched root itself was deleted, moved, or its filesystem unmounted.
    #[error("the watched directory {path} was removed, moved or unmounted")]
    RootGone { path: PathBuf },
}

impl WatchError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            WatchError::Init { path, .. }
            | WatchError::WatchLimit { path }
            | WatchError::Watch { path, .. }
            | WatchError::Io { path, .. }
            | WatchError::Events { path, .. }
            | WatchError::RootGone { path } => path,
        }
    }
}

/// True for errors meaning "the entry vanished or is not a directory any more": the tree is
/// live, so those are expected while walking it.
///
/// By kind, not by raw errno: `fs_err` wraps the OS error (so `raw_os_error` is `None`) and
/// keeps its kind. A whiteout (a character device) found where a directory was is
/// `NotADirectory`: overlayfs replaces a copied-up directory by one when it is removed.
fn vanished(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    ) || matches!(os_code(e), Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP))
}

/// The OS error number of `e`, also when a wrapper (`fs_err`) carries the OS error inside.
fn os_code(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        let inner = e.get_ref()?;
        inner
            .downcast_ref::<io::Error>()
            .or_else(|| inner.source()?.downcast_ref::<io::Error>())
            .and_then(io::Error::raw_os_error)
    })
}

// ------------------------------------------------------------------------------------------
// Ignore patterns
// ------------------------------------------------------------------------------------------

/// Paths, relative to the watched root, whose changes never trigger a capture.
///
/// Pattern syntax (patterns are matched component by component against the relative path):
///
/// * `tmp`, `/tmp`, `root/.cache` — anchored at the root: the directory (or file) of that
///   path and everything below it. A leading `/` is optional.
/// * `*` and `?` inside a component are globs within that component: `*` matches any run of
///   bytes (leading dots included), `?` exactly one byte. `home/*/.cache` ignores every
///   user's cache. There are no character classes; `[` is literal.
/// * `**` as a whole component matches any number of components, zero included:
///   `**/node_modules/.cache` ignores `node_modules/.cache` at any depth, `a/**/b` ignores
///   `a/b`, `a/x/b`, `a/x/y/b`. A trailing `/**` adds nothing (a match already covers
///   everything below).
/// * A pattern without `/` that contains a glob, such as `*.log`, is a name glob at any
///   depth (it means `**/*.log`); a directory it matches is ignored with its contents.
///
/// Empty components and `.` components are dropped (`./tmp//x/` is `tmp/x`), so are
/// patterns that end up empty (`""`, `/`). The root itself is never ignored.
#[derive(Debug, Clone, Default)]
pub struct IgnoreSet {
    patterns: Vec<Vec<Part>>,
}

/// One component of a compiled pattern.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// `**`: any number of components.
    AnyDepth,
    /// A component without globs, compared byte for byte.
    Literal(Vec<u8>),
    /// A component with `*` or `?`.
    Glob(Vec<u8>),
}

fn has_glob(component: &str) -> bool {
    component.contains(['*', '?'])
}

/// Compiles one pattern; `None` when it is empty.
fn compile(pattern: &str) -> Option<Vec<Part>> {
    let components: Vec<&str> = pattern
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let mut parts = Vec::with_capacity(components.len() + 1);
    if let [only] = components.as_slice() {
        if !pattern.contains('/') && has_glob(only) {
            parts.push(Part::AnyDepth);
        }
    }
    for c in components {
        let part = if c == "**" {
            Part::AnyDepth
        } else if has_glob(c) {
            Part::Glob(c.as_bytes().to_vec())
        } else {
            Part::Literal(c.as_bytes().to_vec())
        };
        if part == Part::AnyDepth && parts.last() == Some(&Part::AnyDepth) {
            continue;
        }
        parts.push(part);
    }
    // A trailing `**` matches zero components, so it never changes the result.
    while parts.len() > 1 && parts.last() == Some(&Part::AnyDepth) {
        parts.pop();
    }
    (!parts.is_empty()).then_some(parts)
}

/// `*`/`?` glob match of one component (byte-wise, iterative with one backtrack point).
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// True when `parts` matches a prefix (one or more leading components) of `components`.
fn matches_prefix(parts: &[Part], components: &[&[u8]]) -> bool {
    match parts.split_first() {
        None => true,
        Some((Part::AnyDepth, rest)) => {
            (0..=components.len()).any(|skip| matches_prefix(rest, &components[skip..]))
        }
        Some((part, rest)) => match components.split_first() {
            None => false,
            Some((c, tail)) => {
                let ok = match part {
                    Part::Literal(lit) => lit.as_slice() == *c,
                    Part::Glob(glob) => glob_match(glob, c),
                    Part::AnyDepth => true,
                };
                ok && matches_prefix(rest, tail)
            }
        },
    }
}

impl IgnoreSet {
    /// Compiles `patterns` (syntax in the type's documentation). Never fails: every string is
    /// a valid pattern; empty ones are dropped.
    pub fn new(patterns: &[String]) -> IgnoreSet {
        IgnoreSet {
            patterns: patterns.iter().filter_map(|p| compile(p)).collect(),
        }
    }

    /// An ignore set that ignores nothing.
    pub fn none() -> IgnoreSet {
        IgnoreSet::default()
    }

    /// Whether changes at `rel` (a path relative to the watched root; a leading `/` or `./`
    /// is tolerated) are ignored. The root (an empty path) never is.
    pub fn is_ignored(&self, rel: &Path) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        let components: Vec<&[u8]> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name.as_bytes()),
                _ => None,
            })
            .collect();
        if components.is_empty() {
            return false;
        }
        self.patterns
            .iter()
            .any(|parts| matches_prefix(parts, &components))
    }

    /// What a box changes constantly without it being worth a snapshot: temp directories,
    /// system caches and logs, per-user caches, Python bytecode and test caches, bundler
    /// caches.
    pub fn default_patterns() -> Vec<String> {
        [
            "tmp",
            "var/tmp",
            "var/cache",
            "var/log",
            "root/.cache",
            "home/*/.cache",
            "**/__pycache__",
            "**/node_modules/.cache",
            "**/.pytest_cache",
            "**/.bash_history",
            "**/.python_history",
            "**/.lesshst",
            "**/.viminfo",
            // `git status` rewrites the index to refresh its stat data: alone, that is no
            // change of the project (the index is still captured with the next node).
            "**/.git/index",
        ]
        .iter()
        .map(|p| (*p).to_owned())
        .collect()
    }
}

// ------------------------------------------------------------------------------------------
// The watcher
// ------------------------------------------------------------------------------------------

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
struct RawEvent {
    wd: i32,
    mask: EventMask,
    name: Option<OsString>,
}

/// Size of the buffer events are read into (a read returns as many whole events as fit).
const READ_BUFFER: usize = 64 * 1024;
/// At most this many reads per [`Watcher::poll`], so a storm of events cannot keep one call
/// busy forever; what is left is returned by the next call.
const MAX_READS_PER_POLL: usize = 64;

/// Events that mean "something in this directory changed". Reads and opens are left out.
fn change_mask() -> WatchMask {
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
///   as changes, when that event is processed) or after the watch limit was hit (which is an
///   error: the caller must stop relying on the watcher);
/// * `dirs` maps each live watch to the directory's current path relative to the root:
///   a directory moved inside the tree is re-watched under its new path, one moved out of
///   the tree (or into an ignored path) loses its watches;
/// * ignored directories are never watched, and symlinks are never followed.
pub struct Watcher {
    root: PathBuf,
    ignore: IgnoreSet,
    inotify: Inotify,
    /// Watch descriptor id → (descriptor, directory path relative to the root).
    dirs: HashMap<i32, (WatchDescriptor, PathBuf)>,
    root_wd: i32,
    buffer: Vec<u8>,
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
    pub fn new(root: &Path, ignore: IgnoreSet) -> Result<Watcher, WatchError> {
        let inotify = Inotify::init().map_err(|source| WatchError::Init {
            path: root.to_owned(),
            source,
        })?;
        let mut watcher = Watcher {
            root: root.to_owned(),
            ignore,
            inotify,
            dirs: HashMap::new(),
            root_wd: -1,
            buffer: vec![0; READ_BUFFER],
        };
        watcher.watch_root()?;
        watcher.watch_dirs(vec![PathBuf::new()], false)?;
        Ok(watcher)
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
    /// [`WatchError::RootGone`] when the root was removed, moved or unmounted (as when a
    /// checkout replaces the layer: build a new watcher on the new one). After an error the
    /// watcher no longer covers the whole tree: drop it, and fall back to [`fingerprint`]
    /// polling (or build a new watcher).
    pub fn poll(&mut self, timeout: Duration) -> Result<Seen, WatchError> {
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
    fn wait(&self, timeout: Duration) -> Result<bool, WatchError> {
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
    fn read_batch(&mut self) -> Result<Option<Vec<RawEvent>>, WatchError> {
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
    fn process(
        &mut self,
        batch: Vec<RawEvent>,
        seen: &mut Seen,
        appeared: &mut Vec<PathBuf>,
    ) -> Result<(), WatchError> {
        for event in batch {
            if event.mask.contains(EventMask::Q_OVERFLOW) {
                seen.overflowed = true;
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
                // A change of the watched directory itself (chmod, xattr): it is watched,
                // so it is not ignored.
                None => {
                    seen.changed += 1;
                    continue;
                }
            };
            if self.ignore.is_ignored(&rel) {
                continue;
            }
            seen.changed += 1;
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

    fn root_gone(&self) -> WatchError {
        WatchError::RootGone {
            path: self.root.clone(),
        }
    }

    /// Drops the watches of `rel` and every directory below it (it moved away; if it moved
    /// to a non-ignored place inside the tree, the `MOVED_TO` event re-watches it there).
    fn forget_subtree(&mut self, rel: &Path) {
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
    fn watch_root(&mut self) -> Result<(), WatchError> {
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
    fn watch_dirs(&mut self, todo: Vec<PathBuf>, count: bool) -> Result<usize, WatchError> {
        if todo.is_empty() {
            return Ok(0);
        }
        let mask = change_mask() | WatchMask::DONT_FOLLOW;
        let watches = self.inotify.watches();
        let (root, ignore) = (&self.root, &self.ignore);
        let visited = walk_levels(todo, |rel: &Path| {
            let abs = root.join(rel);
            let watch = if rel.as_os_str().is_empty() {
                None
            } else {
                match watches.clone().add(&abs, mask) {
                    Ok(wd) => Some((wd, rel.to_owned())),
                    Err(e) if vanished(&e) => return Ok((Vec::new(), (None, 0))),
                    Err(e) => return Err(add_error(&abs, e)),
                }
            };
            let mut subdirs = Vec::new();
            let mut found = 0;
            let listed = list_dir(&abs, rel, ignore, |child, entry| {
                found += 1;
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
    fn rescan(&mut self) -> Result<(), WatchError> {
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

// ------------------------------------------------------------------------------------------
// Walking
// ------------------------------------------------------------------------------------------

/// Maps an `inotify_add_watch` failure to an error (ENOSPC: the watch limit).
fn add_error(path: &Path, source: io::Error) -> WatchError {
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

/// Why listing a directory stopped.
enum ListError {
    /// The directory vanished or is not a directory any more.
    Vanished,
    Failed(WatchError),
}

/// Calls `each(child, entry)` for every non-ignored entry of directory `abs` (whose path
/// relative to the root is `rel`), `child` being the entry's relative path. Entries that
/// vanish while being listed are skipped.
fn list_dir(
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
const PARALLEL_LEVEL: usize = 16;

/// Visits the directories `start` and, level by level, the subdirectories `visit` returns
/// for each, collecting what `visit` returns besides. The directories of a level with at
/// least [`PARALLEL_LEVEL`] of them are shared among one thread per core (at most 8), each
/// taking the next unvisited one, since listing and `lstat` calls are most of the cost of a
/// big tree. The first error stops the walk and is returned.
fn walk_levels<T, F>(start: Vec<PathBuf>, visit: F) -> Result<Vec<T>, WatchError>
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

// ------------------------------------------------------------------------------------------
// Fingerprint
// ------------------------------------------------------------------------------------------

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

fn entry_hash(rel: &Path, meta: &std::fs::Metadata) -> u64 {
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

// ------------------------------------------------------------------------------------------
// Debouncer
// ------------------------------------------------------------------------------------------

/// When to capture: pure decision logic over instants the caller supplies (no IO, no clock).
///
/// Invariants:
/// * clean (nothing unsaved) ⇔ `first` and `last` are both `None`; dirty ⇒ `first <= last`;
/// * once dirty, [`due`](Debouncer::due) becomes true no later than `max_delay` after the
///   first unsaved change, however often changes keep arriving (a continuous stream cannot
///   postpone a capture forever), and `quiet` after the last change otherwise;
/// * `quiet` is at most [`Debouncer::MAX_QUIET`] (1 s).
#[derive(Debug, Clone)]
pub struct Debouncer {
    quiet: Duration,
    max_delay: Duration,
    /// The first change not yet captured.
    first: Option<Instant>,
    /// The latest change seen.
    last: Option<Instant>,
}

impl Default for Debouncer {
    /// [`Debouncer::DEFAULT_QUIET`] and [`Debouncer::DEFAULT_MAX_DELAY`].
    fn default() -> Self {
        Debouncer::new(Self::DEFAULT_QUIET, Self::DEFAULT_MAX_DELAY)
    }
}

impl Debouncer {
    /// Default quiet period: a capture follows one second without changes.
    pub const DEFAULT_QUIET: Duration = Duration::from_secs(1);
    /// Longest allowed quiet period; longer values are clamped to it.
    pub const MAX_QUIET: Duration = Duration::from_secs(1);
    /// Default maximum delay between the first unsaved change and its capture.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(10);

    /// A clean debouncer. `quiet` is clamped to [`Debouncer::MAX_QUIET`]; a `max_delay`
    /// shorter than `quiet` makes every capture happen at `max_delay`.
    pub fn new(quiet: Duration, max_delay: Duration) -> Debouncer {
        Debouncer {
            quiet: quiet.min(Self::MAX_QUIET),
            max_delay,
            first: None,
            last: None,
        }
    }

    /// The quiet period in use (after clamping).
    pub fn quiet(&self) -> Duration {
        self.quiet
    }

    /// The maximum delay in use.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// A change was seen at `now`.
    pub fn change(&mut self, now: Instant) {
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                self.first = Some(first.min(now));
                self.last = Some(last.max(now));
            }
            _ => {
                self.first = Some(now);
                self.last = Some(now);
            }
        }
    }

    /// True when there are unsaved changes and either `quiet` passed since the last change
    /// or `max_delay` passed since the first unsaved one.
    pub fn due(&self, now: Instant) -> bool {
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                now.saturating_duration_since(last) >= self.quiet
                    || now.saturating_duration_since(first) >= self.max_delay
            }
            _ => false,
        }
    }

    /// When [`due`](Debouncer::due) becomes true if no further change arrives (`None` when
    /// clean; an instant in the past when already due). Use it as the poll timeout.
    pub fn next_deadline(&self) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        match (
            last.checked_add(self.quiet),
            first.checked_add(self.max_delay),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A snapshot reflecting every change seen up to `now` was taken. Changes recorded
    /// with a later instant stay unsaved, their maximum delay counted from `now`.
    pub fn captured(&mut self, now: Instant) {
        match self.last {
            Some(last) if last > now => self.first = Some(now),
            _ => {
                self.first = None;
                self.last = None;
            }
        }
    }

    /// Whether changes are waiting for a capture.
    pub fn is_dirty(&self) -> bool {
        self.first.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_replaced_by_a_file_or_a_whiteout_counts_as_vanished() {
        // overlayfs replaces a removed copied-up directory by a whiteout (a character
        // device): listing it fails with ENOTDIR, which fs_err wraps.
        let d = tempfile::tempdir().expect("tempdir");
        let file = d.path().join("was-a-dir");
        std::fs::write(&file, "x").expect("write");
        let e = fs_err::read_dir(&file).expect_err("a file is not a directory");
        assert!(vanished(&e), "{e}");
        let e = fs_err::read_dir(d.path().join("missing")).expect_err("missing");
        assert!(vanished(&e), "{e}");
        let listed = list_dir(&file, Path::new("was-a-dir"), &IgnoreSet::none(), |_, _| {
            Ok(())
        });
        assert!(matches!(listed, Err(ListError::Vanished)));
    }

    fn set(patterns: &[&str]) -> IgnoreSet {
        IgnoreSet::new(&patterns.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn anchored_patterns_cover_the_directory_and_below() {
        let s = set(&["tmp", "/var/tmp", "root/.cache/"]);
        for p in [
            "tmp",
            "tmp/x",
            "/tmp/a/b",
            "var/tmp",
            "var/tmp/q",
            "root/.cache/pip/x",
        ] {
            assert!(s.is_ignored(Path::new(p)), "{p}");
        }
        for p in [
            "tmpx",
            "a/tmp",
            "var",
            "var/tmpfoo",
            "root/.cachex",
            "root",
            "",
        ] {
            assert!(!s.is_ignored(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn any_depth_and_component_globs() {
        let s = set(&["**/node_modules/.cache", "home/*/.cache", "a/**/b"]);
        for p in [
            "node_modules/.cache",
            "x/y/node_modules/.cache/babel/1",
            "home/alice/.cache",
            "home/bob/.cache/pip",
            "a/b",
            "a/x/b/c",
            "a/x/y/b",
        ] {
            assert!(s.is_ignored(Path::new(p)), "{p}");
        }
        for p in [
            "node_modules",
            "node_modules/cache",
            "home/.cache",
            "home/alice/x/.cache",
            "a/x",
            "b",
        ] {
            assert!(!s.is_ignored(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn name_globs_match_at_any_depth() {
        let s = set(&["*.log", "core.?"]);
        for p in ["x.log", "a/b/c.log", "a.log/inner", "d/core.1", ".log"] {
            assert!(s.is_ignored(Path::new(p)), "{p}");
        }
        for p in ["x.log.gz", "log", "a/core.12", "a/b"] {
            assert!(!s.is_ignored(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn empty_patterns_are_dropped_and_root_never_ignored() {
        let s = set(&["", "/", ".", "//"]);
        assert!(s.patterns.is_empty());
        assert!(!s.is_ignored(Path::new("anything")));
        let all = set(&["**"]);
        assert!(all.is_ignored(Path::new("a/b")));
        assert!(!all.is_ignored(Path::new("")));
    }

    #[test]
    fn default_patterns() {
        let s = IgnoreSet::new(&IgnoreSet::default_patterns());
        for p in [
            "tmp/a",
            "var/tmp/b",
            "var/cache/apt/archives/x.deb",
            "var/log/syslog",
            "root/.cache/pip",
            "home/dev/.cache/uv",
            "workspace/pkg/__pycache__/m.pyc",
            "workspace/node_modules/.cache/babel",
            "workspace/.pytest_cache/v",
            "workspace/.git/index",
            "workspace/api/.git/index",
        ] {
            assert!(s.is_ignored(Path::new(p)), "{p}");
        }
        for p in [
            "workspace/src/main.rs",
            "usr/lib/python3/dist-packages/x.py",
            "workspace/node_modules/left-pad/index.js",
            "var/lib/dpkg/status",
            "root/.bashrc",
            "workspace/.git/objects/ab/cdef",
            "workspace/.git/refs/heads/main",
        ] {
            assert!(!s.is_ignored(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn glob_matcher() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"*.js", b".js"));
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(glob_match(b"a*b*c", b"abcbc"));
        assert!(!glob_match(b"a*b*c", b"abcb"));
        assert!(glob_match(b"??", b"ab"));
        assert!(!glob_match(b"??", b"a"));
        assert!(glob_match(b"[x]", b"[x]"));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn clean_debouncer_is_never_due() {
        let d = Debouncer::default();
        let t0 = Instant::now();
        assert!(!d.is_dirty());
        assert!(!d.due(t0 + Duration::from_secs(3600)));
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn due_after_the_quiet_period() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(1000), ms(10_000));
        d.change(t0);
        assert!(d.is_dirty());
        assert!(!d.due(t0));
        assert!(!d.due(t0 + ms(999)));
        assert_eq!(d.next_deadline(), Some(t0 + ms(1000)));
        // A later change restarts the quiet period.
        d.change(t0 + ms(500));
        assert!(!d.due(t0 + ms(1000)));
        assert!(!d.due(t0 + ms(1499)));
        assert!(d.due(t0 + ms(1500)));
        assert_eq!(d.next_deadline(), Some(t0 + ms(1500)));
        d.captured(t0 + ms(1500));
        assert!(!d.is_dirty());
        assert!(!d.due(t0 + ms(5000)));
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn a_continuous_stream_is_still_captured_by_the_max_delay() {
        let t0 = Instant::now();
        let mut d = Debouncer::default();
        let mut first_unsaved = None;
        let mut captures = Vec::new();
        // A change every 100 ms for 30 s of synthetic time; the loop checks after each one.
        for i in 0..=300u64 {
            let now = t0 + ms(i * 100);
            d.change(now);
            let first = *first_unsaved.get_or_insert(now);
            assert!(d.next_deadline().expect("dirty") <= first + ms(10_000));
            if d.due(now) {
                // Never late, never early: exactly max_delay after the first unsaved change.
                assert_eq!(now.duration_since(first), ms(10_000));
                captures.push(now.duration_since(t0));
                d.captured(now);
                first_unsaved = None;
            }
        }
        assert_eq!(captures, vec![ms(10_000), ms(20_100)]);
        assert!(
            d.is_dirty(),
            "the changes after the last capture are pending"
        );
    }

    #[test]
    fn next_deadline_is_the_earlier_of_quiet_and_max_delay() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(800), ms(2000));
        d.change(t0);
        assert_eq!(d.next_deadline(), Some(t0 + ms(800)));
        d.change(t0 + ms(700));
        assert_eq!(d.next_deadline(), Some(t0 + ms(1500)));
        d.change(t0 + ms(1400));
        // Quiet would end at 2200 ms; the max delay ends at 2000 ms.
        assert_eq!(d.next_deadline(), Some(t0 + ms(2000)));
        assert!(!d.due(t0 + ms(1999)));
        assert!(d.due(t0 + ms(2000)));
        // The deadline is exactly when `due` turns true.
        let deadline = d.next_deadline().expect("dirty");
        assert!(d.due(deadline));
    }

    #[test]
    fn quiet_is_clamped_to_one_second() {
        let d = Debouncer::new(Duration::from_secs(5), Duration::from_secs(30));
        assert_eq!(d.quiet(), Duration::from_secs(1));
        assert_eq!(d.max_delay(), Duration::from_secs(30));
    }

    #[test]
    fn changes_after_the_capture_instant_stay_unsaved() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(1000), ms(10_000));
        d.change(t0);
        d.change(t0 + ms(2000));
        d.captured(t0 + ms(1500));
        assert!(d.is_dirty());
        assert!(!d.due(t0 + ms(2500)));
        assert!(d.due(t0 + ms(3000)));
        assert_eq!(d.next_deadline(), Some(t0 + ms(3000)));
        // Under a stream, the max delay counts from the capture.
        d.change(t0 + ms(2900));
        d.change(t0 + ms(11_000));
        assert!(!d.due(t0 + ms(11_499)));
        assert!(d.due(t0 + ms(11_500)));
    }

    #[test]
    fn out_of_order_instants_keep_first_and_last() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut d = Debouncer::new(ms(1000), ms(10_000));
        d.change(t0);
        d.change(t0 - ms(3000));
        assert_eq!(d.next_deadline(), Some(t0 + ms(1000)));
        assert!(d.due(t0 + ms(7000)));
    }
}
