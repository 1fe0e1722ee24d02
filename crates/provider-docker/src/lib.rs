//! agentbox's Docker provider: a box is a container `agentbox-<box>` on a Docker engine
//! (the local one, or the one its record names), its `/workspace` in the container's
//! writable layer, and each node of its history an image of the container (`docker
//! commit`) whose metadata the host store keeps ([`agentbox_store::held`]).
//!
//! The provider holds its boxes' trees ([`agentbox_boxes::provider::Trees::Held`]): every
//! operation on a box's files — create, commit, checkout — goes through it, running or not.
//!
//! What is where:
//! * [`provider`] — [`DockerProvider`], its engines, the [`agentbox_boxes::provider::Provider`]
//!   implementation;
//! * [`names`] — the container, image and label names a box's objects carry;
//! * [`spec`] — the container a box runs in;
//! * [`seed`] — a new box's `/workspace`, made on the host and sent as one tar;
//! * [`image`] — the image a box starts from (`--image`, or built from `--dockerfile`);
//! * [`create`] — a new box's container and first node, [`came_up`] its container seen
//!   to stay up;
//! * [`run`] — commands in a box (exec, collect), [`terminal`] their terminal,
//!   [`start_failure`] the error of one that could not start;
//! * [`boxgit`] — git on the box's repositories, run inside its container (sync, dirty
//!   paths, a pulled commit);
//! * [`capture`] — whether a box changed since its last node, and its nodes;
//! * [`node_diff`] — `show`/`diff` of its nodes, by their [`manifest`]s;
//! * [`checkout`] — a box moved to another node (its container recreated), [`remake`]
//!   its container made again (also when it is gone);
//! * [`procs`] — its processes; [`spawn`] its background ones, [`spawned`] the host's table
//!   of them;
//! * [`discard`] — a destroyed box's container let go of (left for `prune` when its engine
//!   does not answer);
//! * [`checkpoint`] — a box's checkpoints as images (and [`restore`] a box made from
//!   one), their files read and changed in a container by `container_fs`;
//! * [`relay`] — the in-box `agentbox`: its static binary in the container, the exec stream
//!   its requests cross, and the per-box host process answering them;
//! * [`prune`] — what boxes left on an engine, and the images GC freed; [`ledger`] the
//!   engines to look on.

pub mod boxgit;
pub mod came_up;
pub mod capture;
pub mod checkout;
pub mod checkpoint;
pub mod checkpoint_file;
mod container_fs;
pub mod create;
pub mod discard;
pub mod errors;
pub mod image;
pub mod ledger;
pub mod log_read;
pub mod manifest;
pub mod names;
pub mod node_diff;
pub mod procs;
pub mod provider;
pub mod prune;
pub mod prune_all;
pub mod relay;
pub mod remake;
mod reseed_plan;
pub mod restore;
pub mod run;
pub mod seed;
pub mod spawn;
pub mod spawned;
pub mod spec;
pub mod start_failure;
pub mod terminal;

pub use provider::DockerProvider;
