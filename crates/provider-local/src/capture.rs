//! Auto-capture of changes nobody's command ended for: background processes, long shell
//! sessions. One thread per running box watches the box's working layer (the overlay's
//! upper directory, where every write of the box lands) and asks for a node once changes
//! settle: after [`Debouncer`]'s quiet period (1 s), and never later than its maximum delay
//! (10 s) under a continuous stream of changes.
//!
//! Inotify tells when something changed without walking the tree; a fingerprint scan every
//! [`BACKSTOP`] catches what inotify cannot report (a full queue is handled by the watcher's
//! rescan; a watch limit makes the scan the only mechanism). While the watcher works, that
//! scan looks only at the files the box holds open or mapped (a write through a shared
//! mapping raises no event), not at everything the box wrote. The watcher is shared with
//! the change check after each command, which reads its journal instead of walking the
//! layer (see [`crate::layer_watch`]). Whether a node is made is
//! decided by the store's own change list filtered by the ignore set, so events for ignored
//! paths or for writes that changed nothing make no node.
//!
//! Invariants (each one broken once, silently, before it was written down):
//! * The loop follows the layer directory, not the box generation alone: a checkout, an
//!   undo, a restart after a killed supervisor or a backend that replaces the upper
//!   directory under the same path (btrfs and layers both do) give a new directory, and the
//!   watcher and the backstop scan move to it within one poll ([`POLL`]) — when the
//!   watcher's root is deleted or moved, or when the path's device and inode change.
//!   A lost root is never a reason to stop: the previous loop waited for a new generation
//!   that a replacement within one generation never brings, and captured nothing, silently.
//! * The backstop scan runs whatever happened to the watcher, so the 10 s maximum delay
//!   holds even when inotify is unusable.
//! * Every degradation (no watcher, a failing scan, a failing capture) is logged once when it
//!   starts and once when it ends, and is visible in [`CaptureHealth`] (`agentbox status`).

pub use agentbox_boxes::types::{CaptureHealth, CaptureMode};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::watch::{fingerprint, Debouncer, IgnoreSet, WatchError, Watcher};

pub use agentbox_boxes::types::BACKSTOP;

/// Longest the loop blocks before it looks again at which layer the box writes to.
pub const POLL: Duration = Duration::from_secs(1);

/// What the capture loop needs from the supervisor.
pub trait Capturer: Send + Sync {
    /// The directory the box's writes land in now and the box generation it belongs to
    /// (every checkout restarts the box on a fresh one), or `None` while it restarts.
    fn layer_dir(&self) -> Option<(u64, PathBuf)>;
    /// Make a node if something not ignored changed; `Ok(false)`: not now, a foreground
    /// command holds captures (see `supervisor::foreground`), ask again later. `Err` is
    /// logged and retried later.
    fn capture(&self) -> Result<bool, String>;
    /// A count that moves when the changes pending so far are no reason for a node (a
    /// `--no-capture` command ended).
    fn forgets(&self) -> u64;
    /// False once the supervisor is shutting down.
    fn alive(&self) -> bool;
    /// The watcher's state changed (shown by `status`).
    fn report(&self, health: &CaptureHealth);
    /// Where the loop shares its watcher with the change check after commands.
    fn watch(&self) -> &crate::layer_watch::LayerWatch;
    /// The layer-relative paths of the files the box's processes hold open or mapped
    /// (see [`crate::held_files`]), or `None` if they cannot be listed.
    fn held_files(&self) -> Option<Vec<PathBuf>>;
}

/// Run until `c.alive()` turns false.
pub fn run(c: &dyn Capturer, ignore: &IgnoreSet) {
    let mut state = State::new(c);
    while c.alive() {
        let Some((generation, dir)) = c.layer_dir() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        watch_layer(c, &mut state, generation, &dir, ignore);
    }
}

/// A directory's identity: device and inode. A replaced directory has a new one even when
/// its path is the same.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    fs_err::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// The loop's health, reported to the supervisor and logged on every change of mode or
/// problem (so a problem is logged once, not once per poll).
struct State<'a> {
    c: &'a dyn Capturer,
    health: CaptureHealth,
}

impl<'a> State<'a> {
    fn new(c: &'a dyn Capturer) -> State<'a> {
        let health = CaptureHealth::default();
        c.report(&health);
        State { c, health }
    }

    fn set(&mut self, mode: CaptureMode, problem: Option<String>, watches: usize) {
        let changed = self.health.mode != mode || self.health.problem != problem;
        if changed {
            match (&problem, mode) {
                (Some(p), _) => eprintln!("auto-capture: {p}"),
                (None, CaptureMode::Watching) if self.health.problem.is_some() => {
                    eprintln!("auto-capture: working again (watching the box's layer)")
                }
                _ => {}
            }
        }
        let before = self.health.clone();
        self.health.mode = mode;
        self.health.problem = problem;
        self.health.watches = watches;
        if self.health != before {
            self.c.report(&self.health);
        }
    }

    fn layer(&mut self, dir: &Path) {
        if self.health.layer.as_deref() != Some(dir) {
            self.health.layer = Some(dir.to_owned());
            self.c.report(&self.health);
        }
    }
}

/// A recording watcher of `dir`, or the reason there is none (the backstop scan covers it).
fn new_watcher(dir: &Path, ignore: &IgnoreSet) -> Result<Watcher, String> {
    Watcher::recording(dir, ignore.clone()).map_err(|e| match e {
        WatchError::RootGone { .. } => format!("{} vanished while being watched", dir.display()),
        e => e.to_string(),
    })
}

/// Watch the layer of box generation `generation` at `dir` until the box moves to another
/// generation or the supervisor ends. A directory replaced under the same path is followed.
fn watch_layer(
    c: &dyn Capturer,
    state: &mut State<'_>,
    generation: u64,
    dir: &Path,
    ignore: &IgnoreSet,
) {
    state.layer(dir);
    let mut debouncer = Debouncer::default();
    // `None` until the directory exists (it may be in the middle of being replaced).
    let mut watched: Option<(u64, u64)> = None;
    // The shared watcher's descriptor, to wait on; `None` while there is no watcher.
    let mut watcher: Option<std::os::fd::OwnedFd> = None;
    // Whatever the loop leaves by, the watcher of this layer goes with it.
    struct Unshare<'a>(&'a dyn Capturer);
    impl Drop for Unshare<'_> {
        fn drop(&mut self) {
            self.0.watch().clear();
        }
    }
    let _unshare = Unshare(c);
    let mut last_print: Option<u64> = None;
    let mut next_scan = Instant::now() + BACKSTOP;
    // Set while a foreground command holds captures: asked again at this instant.
    let mut held_until: Option<Instant> = None;
    let mut forgets = c.forgets();
    // Set when the watcher could not be built: retried with the next backstop scan.
    let mut scan_only = false;
    while c.alive() {
        if c.layer_dir().map(|(g, _)| g) != Some(generation) {
            return;
        }
        let now_identity = identity(dir);
        if now_identity != watched {
            // A new directory (the first one, or a replacement): everything starts over on
            // it, and whatever it already holds is looked at by a capture.
            watched = now_identity;
            watcher = None;
            c.watch().clear();
            scan_only = false;
            if watched.is_none() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            last_print = backstop_print(c, dir, ignore, false).ok();
            debouncer.change(Instant::now());
        }
        if watcher.is_none() && !scan_only {
            match new_watcher(dir, ignore).and_then(|w| {
                let count = w.watch_count();
                let fd = c.watch().install(w).map_err(|e| e.to_string())?;
                Ok((fd, count))
            }) {
                Ok((fd, count)) => {
                    state.set(CaptureMode::Watching, None, count);
                    watcher = Some(fd);
                }
                Err(e) => {
                    scan_only = true;
                    state.set(
                        CaptureMode::Scanning,
                        Some(format!(
                            "cannot watch {}: {e}; falling back to a scan every {}s",
                            dir.display(),
                            BACKSTOP.as_secs()
                        )),
                        0,
                    );
                }
            }
        }
        let now = Instant::now();
        let wake = debouncer
            .next_deadline()
            .map(|d| held_until.map_or(d, |h| d.max(h)))
            .map_or(next_scan, |d| d.min(next_scan));
        let timeout = wake.saturating_duration_since(now).min(POLL);
        let polled = watcher.as_ref().map(|fd| {
            if wait_readable(fd, timeout) {
                // Let the events of a busy writer gather before reading them: the kernel
                // merges a repeated event (one file's MODIFY after MODIFY) only while it is
                // unread, so reading at the first one means a wake-up and a read per write.
                // An `npm install` or `pip install` cost this thread ~0.5 s of CPU that way.
                // Nothing waits on it: a capture follows a quiet period far longer.
                std::thread::sleep(COALESCE.min(timeout));
            }
            c.watch().poll().unwrap_or(Err(WatchError::RootGone {
                path: dir.to_owned(),
            }))
        });
        match polled {
            Some(Ok(seen)) => {
                if seen.any() {
                    debouncer.change(Instant::now());
                }
                let count = c.watch().watch_count();
                if state.health.mode == CaptureMode::Watching && count != state.health.watches {
                    state.set(CaptureMode::Watching, None, count);
                }
            }
            Some(Err(WatchError::RootGone { .. })) => {
                // The directory was removed or moved: whatever is at the path now is the
                // layer (a new directory may even have the old one's inode number, which
                // ext4 reuses at once), so everything starts over on it.
                watcher = None;
                c.watch().clear();
                watched = None;
                continue;
            }
            Some(Err(e)) => {
                watcher = None;
                c.watch().clear();
                scan_only = true;
                state.set(
                    CaptureMode::Scanning,
                    Some(format!(
                        "{e}; falling back to a scan every {}s",
                        BACKSTOP.as_secs()
                    )),
                    0,
                );
            }
            None => std::thread::sleep(timeout),
        }
        let now = Instant::now();
        if now >= next_scan {
            next_scan = now + BACKSTOP;
            match backstop_print(c, dir, ignore, watcher.is_some()) {
                Ok(p) => {
                    if Some(p) != last_print {
                        last_print = Some(p);
                        debouncer.change(now);
                    }
                    if state.health.mode == CaptureMode::Failing && watcher.is_some() {
                        state.set(CaptureMode::Watching, None, state.health.watches);
                    }
                }
                // Being replaced: the identity check handles it.
                Err(_) if identity(dir) != watched => continue,
                Err(e) => state.set(
                    CaptureMode::Failing,
                    Some(format!("cannot scan the box's layer: {e}")),
                    0,
                ),
            }
            // A watcher that could not be built is tried again (the limit may have been
            // raised, a transient error may have passed).
            scan_only = false;
        }
        if c.forgets() != forgets {
            // A `--no-capture` command ended: what it wrote is no reason for a node (it stays
            // in the box for the next one).
            forgets = c.forgets();
            debouncer = Debouncer::default();
            held_until = None;
            last_print = backstop_print(c, dir, ignore, watcher.is_some()).ok();
        }
        if debouncer.due(now) && held_until.is_none_or(|h| now >= h) {
            held_until = None;
            // The outcome is recorded (and logged) by the capturer itself.
            match c.capture() {
                Ok(true) => {
                    debouncer.captured(now);
                    last_print = backstop_print(c, dir, ignore, watcher.is_some()).ok();
                }
                Ok(false) => held_until = Some(now + POLL),
                Err(_) => {
                    // Try again after another quiet period rather than spinning.
                    debouncer.captured(now);
                    debouncer.change(now);
                }
            }
        }
    }
}

/// What the backstop scan compares: with a working watcher, only the files the box holds
/// (every other change raises an event; a write through a shared mapping does not, see
/// [`crate::layer_watch`]), so an idle box does not walk everything it wrote every
/// [`BACKSTOP`]; otherwise, or when those files cannot be listed, the whole layer.
fn backstop_print(
    c: &dyn Capturer,
    dir: &Path,
    ignore: &IgnoreSet,
    watching: bool,
) -> Result<u64, WatchError> {
    use std::hash::{Hash, Hasher};
    match watching.then(|| c.held_files()).flatten() {
        Some(held) => {
            let mut h = std::hash::DefaultHasher::new();
            for rel in held.iter().filter(|p| !ignore.is_ignored(p)) {
                if let Ok(m) = std::fs::symlink_metadata(dir.join(rel)) {
                    (rel, m.ino(), m.ctime(), m.ctime_nsec(), m.size()).hash(&mut h);
                }
            }
            Ok(h.finish())
        }
        None => fingerprint(dir, ignore),
    }
}

/// How long the capture loop lets events gather once the watcher has some (see its use).
const COALESCE: Duration = Duration::from_millis(25);

/// Wait until `fd` is readable or `timeout` passed (an interrupted wait just ends early);
/// whether it is readable.
fn wait_readable(fd: &std::os::fd::OwnedFd, timeout: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let limit = Timespec::try_from(timeout).ok();
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    matches!(rustix::event::poll(&mut fds, limit.as_ref()), Ok(n) if n > 0)
}
