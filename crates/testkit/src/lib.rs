//! Shared test harness.
//!
//! * [`tier`]: privilege tiers. A test that needs a capability calls `tier::require_*`; when
//!   the capability is missing the test prints why and returns early on a developer machine,
//!   and panics when `CI=true` (CI runs as root and must run every tier).
//! * [`TempHome`]: a fresh agentbox home per test.
//! * [`tree_gen`]: deterministic random directory trees (and a proptest strategy).
//! * [`loopfs::LoopFs`]: a throwaway btrfs or ext4 on a loop device (root only).

pub mod loopfs;
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

impl Default for TempHome {
    fn default() -> Self {
        TempHome::new()
    }
}
