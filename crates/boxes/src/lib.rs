//! Boxes: the domain every front end calls. A front end builds one [`Boxes`] (the façade)
//! with the provider it picked and calls one operation per command; the crate owns the
//! store for the command and names no provider (the per-box supervisor is the local
//! provider's, in `agentbox_provider_local`).
//!
//! Each concern has one place; each folder's `mod.rs` says what it owns and what it must
//! not do. From the bottom up — a module uses only the ones before it (`scripts/layout-check`
//! fails on a circle):
//! * [`types`], [`sessions`], [`project`]: the vocabulary;
//! * [`hostview`]: what of the host a box sees (a leaf: given what of a record matters);
//! * [`config`]: layered configuration;
//! * [`error`]: [`BoxError`] with its exit code and hint; [`progress`]: how long work
//!   reports to its front end;
//! * [`records`]: what exists in a home on disk (records, registry, images);
//! * [`provider`]: the trait a box's runtime implements; [`facade`]: the [`Boxes`] handle;
//! * [`checkpoints`], then [`lifecycle`] (making a box, and the façade's `ops` on top),
//!   then [`history`] (nodes, fork, tournament, remote) and [`agents`];
//! * [`relay`]: what crosses between a box and the host.

pub use agentbox_sandbox::cgroup;
pub mod agents;
pub mod checkpoints;
pub mod config;
pub mod error;
pub mod facade;
pub mod history;
pub mod hostview;
pub mod lifecycle;
pub mod progress;
pub mod project;
pub mod provider;
pub mod prune;
pub mod records;
pub mod relay;
pub mod sessions;
pub mod types;

// The names every module and front end uses, at the crate's root so that they read as
// `agentbox_boxes::Boxes` and `crate::Result`: the façade's handle and its error.
pub use error::{BoxError, Result};
pub use facade::Boxes;
