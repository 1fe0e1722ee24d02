//! The store's integration tests, in one test binary (one link for all of them): each module
//! is one area. Tests that need root (mounts, btrfs on a loop device) skip with a reason on
//! a developer machine and fail under `CI=true` (see `agentbox_testkit::tier`).

mod common;

mod btrfs_backend;
mod bundle;
mod capture;
mod checkpoints;
mod conformance;
mod fsops;
mod held;
mod index;
mod prestage;
mod setup;
mod stopped_box;
