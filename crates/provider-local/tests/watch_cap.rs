//! The watcher's cap on watches ([`max_watches`]): a box making directories without end never
//! takes more of the host's inotify watches than its cap, and the watcher says so with
//! [`WatchError::TooManyDirs`] so its user falls back to scanning.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use agentbox_provider_local::watch::{max_watches, IgnoreSet, WatchError, Watcher};

/// The watches the kernel holds for `w`'s inotify instance (its `fdinfo` lines).
fn kernel_watches(w: &Watcher) -> usize {
    let info =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", w.as_fd_raw())).expect("fdinfo");
    info.lines()
        .filter(|l| l.starts_with("inotify wd:"))
        .count()
}

trait RawFd {
    fn as_fd_raw(&self) -> i32;
}

impl RawFd for Watcher {
    fn as_fd_raw(&self) -> i32 {
        std::os::fd::AsFd::as_fd(self).as_raw_fd()
    }
}

fn dirs(root: &Path, from: usize, to: usize) {
    for i in from..to {
        fs_err::create_dir_all(root.join(format!("d{}/e", i))).expect("mkdir");
    }
}

#[test]
fn a_tree_over_the_cap_is_refused_at_setup() {
    let t = tempfile::tempdir().expect("tempdir");
    dirs(t.path(), 0, 40); // 80 directories
    match Watcher::recording_capped(t.path(), IgnoreSet::none(), 50) {
        Err(WatchError::TooManyDirs { path, cap }) => {
            assert_eq!((path.as_path(), cap), (t.path(), 50));
        }
        other => panic!("expected TooManyDirs, got {other:?}"),
    }
}

#[test]
fn directories_made_after_setup_stop_at_the_cap() {
    let t = tempfile::tempdir().expect("tempdir");
    dirs(t.path(), 0, 5);
    let mut w = Watcher::recording_capped(t.path(), IgnoreSet::none(), 50).expect("watcher");
    assert_eq!(w.watch_count(), 11);
    assert_eq!(kernel_watches(&w), 11);
    dirs(t.path(), 5, 200);
    let mut failed = None;
    for _ in 0..100 {
        match w.poll(Duration::from_secs(5)) {
            Ok(seen) if seen.any() => {}
            Ok(_) => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(failed, Some(WatchError::TooManyDirs { cap: 50, .. })),
        "{failed:?}"
    );
    let held = kernel_watches(&w);
    assert!(held <= 50, "{held} watches held, the cap is 50");
    assert!(failed
        .expect("error")
        .to_string()
        .contains("more than 50 directories"));
}

/// A watcher that failed at its cap stays failed: polled again (a second reader of a shared
/// watcher may do so before its owner drops it), it adds no watch for directories made
/// since, so the kernel never holds more than the cap for it, counting the watches the
/// failed walk had added.
#[test]
fn a_watcher_failed_at_the_cap_adds_no_watch_when_polled_again() {
    let t = tempfile::tempdir().expect("tempdir");
    dirs(t.path(), 0, 5);
    let mut w = Watcher::recording_capped(t.path(), IgnoreSet::none(), 50).expect("watcher");
    dirs(t.path(), 5, 200);
    let mut failed = None;
    for _ in 0..100 {
        match w.poll(Duration::from_secs(5)) {
            Ok(seen) if seen.any() => {}
            Ok(_) => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(failed, Some(WatchError::TooManyDirs { cap: 50, .. })),
        "{failed:?}"
    );
    for round in 0..3 {
        dirs(t.path(), 200 + round * 100, 300 + round * 100);
        let again = w.poll(Duration::from_secs(5));
        assert!(
            matches!(again, Err(WatchError::TooManyDirs { cap: 50, .. })),
            "polled again after failing: {again:?}"
        );
        let held = kernel_watches(&w);
        assert!(
            held <= 50,
            "{held} watches held after {} more polls, the cap is 50",
            round + 1
        );
    }
}

#[test]
fn the_default_cap_is_a_share_of_the_host_limit() {
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .expect("max_user_watches")
        .trim()
        .parse()
        .expect("a number");
    let cap = max_watches();
    assert!(
        cap <= limit.max(8 * 1024) / 8 || cap == 1024,
        "{cap} of {limit}"
    );
    assert!((1024..=32_768).contains(&cap), "{cap}");
}
