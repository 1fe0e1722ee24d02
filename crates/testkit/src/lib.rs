//! Shared test harness.
//!
//! * [`tier`]: privilege tiers. A test that needs a capability calls `tier::require_*`; when
//!   the capability is missing the test prints why and returns early on a developer machine,
//!   and panics when `CI=true` (CI runs as root and must run every tier).
//! * [`TempHome`]: a fresh agentbox home per test.
//! * [`busybox_image`]: the Docker test image (the host's static busybox).
//! * [`tree_gen`]: deterministic random directory trees (and a proptest strategy).
//! * [`basefix::BaseFixture`]: a directory of the host's `/` a test owns (its base files).
//! * [`loopfs::LoopFs`]: a throwaway btrfs or ext4 on a loop device (root only).
//! * [`remote_docker::RemoteDocker`]: a second Docker engine in a network namespace of the
//!   test's own, reached over `tcp://` with TLS and over `ssh://` (root only).

pub mod basefix;
pub mod busybox_image;
pub mod loopfs;
pub mod remote_docker;
pub mod rootfs;
pub mod tier;
pub mod tree_gen;

use std::path::{Path, PathBuf};

/// A temporary agentbox home, removed on drop.
pub struct TempHome {
    dir: tempfile::TempDir,
}

impl TempHome {
    /// A new home under `$AGENTBOX_TEST_TMP` (default: the system temp dir).
    pub fn new() -> TempHome {
        let base = std::env::var_os("AGENTBOX_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        TempHome::new_in(&base)
    }

    /// A new home under `base`.
    pub fn new_in(base: &Path) -> TempHome {
        let dir = tempfile::Builder::new()
            .prefix("agentbox-test-")
            .tempdir_in(base)
            .expect("create a temporary agentbox home");
        TempHome { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TempHome {
    /// Unmount whatever the test left mounted below the home (deepest first) so that
    /// removing the directory never reaches into a mount and no mount outlives the test.
    fn drop(&mut self) {
        unmount_below(self.dir.path());
    }
}

/// Lazily unmount every mount point at or below `root`, deepest first. Errors are ignored:
/// this is cleanup, and without privileges there is nothing mounted to undo.
pub fn unmount_below(root: &Path) {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    let mut points: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(&root))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    for p in points {
        let _ = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH);
    }
}

impl Default for TempHome {
    fn default() -> Self {
        TempHome::new()
    }
}
