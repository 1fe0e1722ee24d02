//! The sandbox crate's integration tests, in one test binary (one link for all of them): a
//! module per area, run against the real kernel. Tests that need root skip with a reason on
//! a developer machine and fail under `CI=true` (see `agentbox_testkit::tier`).
//!
//! `cgroup_parent.rs` is a binary of its own: it sets `$AGENTBOX_CGROUP_PARENT` for its
//! whole process, which would move the boxes of every test running beside it.

mod cgroup;
