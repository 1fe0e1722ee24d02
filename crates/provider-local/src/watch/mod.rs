//! Change detection for auto-capture.
//!
//! Everything a box changes lands in one host directory tree: its overlayfs upper directory,
//! or the btrfs subvolume used as the upper. The per-box supervisor decides when to snapshot
//! that tree with the pieces of this module:
//!
//! * [`Watcher`] — a recursive inotify watcher of the tree. It costs nothing while the box
//!   is idle (no walking) and reports how many changes it saw since the previous call. It
//!   never holds more than [`max_watches`] watches: a tree with more directories makes it
//!   fail ([`WatchError::TooManyDirs`]), and the caller falls back to scanning.
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
//! # use agentbox_provider_local::watch::{Debouncer, IgnoreSet, Watcher};
//! # fn capture() {}
//! # fn main() -> Result<(), agentbox_provider_local::watch::WatchError> {
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
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

mod debounce;
mod journal;
mod scan;
mod watcher;

pub use self::debounce::Debouncer;
pub use self::journal::Journal;
pub use self::scan::fingerprint;
use self::scan::*;
pub use self::watcher::{max_watches, Seen, Watcher};
pub use agentbox_boxes::records::ignore::IgnoreSet;

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
    /// The tree has more directories than one box may watch ([`max_watches`]): every watch
    /// is charged to the supervisor's user (host root for a root box), so a box making
    /// directories without end would otherwise take the host's whole watch limit.
    #[error(
        "{path} has more than {cap} directories, the most one box may watch (every watch \
         counts against the host user's inotify limit). Changes are detected by the \
         periodic backstop scan instead"
    )]
    TooManyDirs { path: PathBuf, cap: usize },
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
    /// The same error once more (a failed [`Watcher`] reports it at every later poll); an
    /// I/O error keeps its kind and message.
    pub fn again(&self) -> WatchError {
        let io = |e: &io::Error| io::Error::new(e.kind(), e.to_string());
        match self {
            WatchError::Init { path, source } => WatchError::Init {
                path: path.clone(),
                source: io(source),
            },
            WatchError::WatchLimit { path } => WatchError::WatchLimit { path: path.clone() },
            WatchError::TooManyDirs { path, cap } => WatchError::TooManyDirs {
                path: path.clone(),
                cap: *cap,
            },
            WatchError::Watch { path, source } => WatchError::Watch {
                path: path.clone(),
                source: io(source),
            },
            WatchError::Io { path, source } => WatchError::Io {
                path: path.clone(),
                source: io(source),
            },
            WatchError::Events { path, source } => WatchError::Events {
                path: path.clone(),
                source: io(source),
            },
            WatchError::RootGone { path } => WatchError::RootGone { path: path.clone() },
        }
    }

    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            WatchError::Init { path, .. }
            | WatchError::WatchLimit { path }
            | WatchError::TooManyDirs { path, .. }
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
        assert!(s.is_empty());
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
        assert!(agentbox_core::glob::matches(b"*", b""));
        assert!(agentbox_core::glob::matches(b"*.js", b".js"));
        assert!(agentbox_core::glob::matches(b"a*b*c", b"axxbyyc"));
        assert!(agentbox_core::glob::matches(b"a*b*c", b"abcbc"));
        assert!(!agentbox_core::glob::matches(b"a*b*c", b"abcb"));
        assert!(agentbox_core::glob::matches(b"??", b"ab"));
        assert!(!agentbox_core::glob::matches(b"??", b"a"));
        assert!(agentbox_core::glob::matches(b"[x]", b"[x]"));
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
