//! Conformance suite: every test runs against every backend (tier 2: mounts need root).
//!
//! * `layers` on a temporary directory of the test machine's filesystem;
//! * `btrfs` on a fresh btrfs filesystem on a loop device.
//!
//! The tests are grouped into `history` (commits, refs, forks, retention, bundles),
//! `random` (property tests of random sessions and trees) and `concurrent` (GC and writes
//! racing a commit).

use std::path::Path;

use agentbox_core::id::NodeId;
use agentbox_store::{CommitOpts, Error, Source, Store};

use crate::common::{
    assert_same, commit, export_zstd, fixtures, import_bundle, read, snapshot_copy, write,
};

mod concurrent;
mod history;
mod random;
