//! Auto-capture of changes nobody's command ended for: background processes, long shell
//! sessions. One thread per running box watches the box's working layer (the overlay's
//! upper directory, where every write of the box lands) and asks for a node once changes
//! settle: after [`Debouncer`]'s quiet period (1 s), and never later than its maximum delay
//! (10 s) under a continuous stream of changes.
//!
//! Inotify tells when something changed without walking the tree; a fingerprint scan every
//! [`BACKSTOP`] catches what inotify cannot report (a full queue is handled by the watcher's
//! rescan; a watch limit makes the scan the only mechanism). Whether a node is made is
//! decided by the store's own change list filtered by the ignore set, so events for ignored
//! paths or for writes that changed nothing make no node.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::watch::{fingerprint, Debouncer, IgnoreSet, WatchError, Watcher};

/// Interval of the backstop fingerprint scan.
pub const BACKSTOP: Duration = Duration::from_secs(10);

/// What the capture loop needs from the supervisor.
pub trait Capturer: Send + Sync {
    /// The directory the box's writes land in now and the box generation it belongs to
    /// (every checkout restarts the box on a fresh one), or `None` while it restarts.
    fn layer_dir(&self) -> Option<(u64, PathBuf)>;
    /// Make a node if something not ignored changed; `Err` is logged and retried later.
    fn capture(&self) -> Result<(), String>;
    /// False once the supervisor is shutting down.
    fn alive(&self) -> bool;
}

/// Run until `c.alive()` turns false.
pub fn run(c: &dyn Capturer, ignore: &IgnoreSet) {
    while c.alive() {
        let Some((generation, dir)) = c.layer_dir() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        watch_layer(c, generation, &dir, ignore);
        // The layer was replaced: wait for the box to be back on its new one.
        while c.alive() && c.layer_dir().map(|(g, _)| g) == Some(generation) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Watch one layer directory until it is replaced (a checkout) or the supervisor ends.
fn watch_layer(c: &dyn Capturer, generation: u64, dir: &Path, ignore: &IgnoreSet) {
    let mut watcher = match Watcher::new(dir, ignore.clone()) {
        Ok(w) => Some(w),
        Err(WatchError::RootGone { .. }) => return,
        Err(e) => {
            eprintln!("auto-capture: {e}; falling back to a scan every {BACKSTOP:?}");
            None
        }
    };
    let mut debouncer = Debouncer::default();
    let mut last_print = fingerprint(dir, ignore).ok();
    let mut next_scan = Instant::now() + BACKSTOP;
    while c.alive() {
        if c.layer_dir().map(|(g, _)| g) != Some(generation) {
            return;
        }
        let now = Instant::now();
        let wake = debouncer
            .next_deadline()
            .map_or(next_scan, |d| d.min(next_scan));
        let timeout = wake
            .saturating_duration_since(now)
            .min(Duration::from_secs(1));
        match watcher.as_mut().map(|w| w.poll(timeout)) {
            Some(Ok(seen)) => {
                if seen.any() {
                    debouncer.change(Instant::now());
                }
            }
            Some(Err(WatchError::RootGone { .. })) => return,
            Some(Err(e)) => {
                eprintln!("auto-capture: {e}; falling back to a scan every {BACKSTOP:?}");
                watcher = None;
            }
            None => std::thread::sleep(timeout),
        }
        let now = Instant::now();
        if now >= next_scan {
            next_scan = now + BACKSTOP;
            match fingerprint(dir, ignore) {
                Ok(p) if Some(p) != last_print => {
                    last_print = Some(p);
                    debouncer.change(now);
                }
                Ok(_) => {}
                Err(WatchError::RootGone { .. }) => return,
                Err(e) => eprintln!("auto-capture scan: {e}"),
            }
        }
        if debouncer.due(now) {
            match c.capture() {
                Ok(()) => {
                    debouncer.captured(now);
                    last_print = fingerprint(dir, ignore).ok();
                }
                Err(e) => {
                    eprintln!("auto-capture: {e}");
                    // Try again after another quiet period rather than spinning.
                    debouncer.captured(now);
                    debouncer.change(now);
                }
            }
        }
    }
}
