//! Audited wrappers over the Linux ioctls agentbox needs and the safe crates do not cover.
//!
//! * [`btrfs`]: subvolumes and snapshots;
//! * [`fiemap`]: file extent maps and the true (sharing-aware) disk usage of trees;
//! * [`quota`]: disk limits of trees (btrfs qgroups, ext4/xfs project quotas);
//! * [`writeback`]: writing file data out without a device flush per file;
//! * [`release`]: closing a descriptor whose last close is slow in the background;
//! * [`priority`]: lowering a background thread's CPU and I/O priority.
//!
//! Every `unsafe` block is one system call (mostly an ioctl over a `#[repr(C)]` struct whose
//! size is checked at compile time against the kernel's), with a `SAFETY:` comment.

pub mod btrfs;
pub mod fiemap;
pub mod priority;
pub mod quota;
mod raw;
pub mod release;
pub mod writeback;
