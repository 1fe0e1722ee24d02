//! Boxes: the domain every front end calls. [`Boxes`] is the façade; each concern has one
//! place (see each folder's `mod.rs` for what it owns and what it must not do).

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
pub mod records;
pub mod relay;
pub mod scope;
pub mod sessions;
pub mod types;
pub mod wire;

// The names every module and front end uses, at the crate's root so that they read as
// `agentbox_boxes::Boxes` and `crate::Result`: the façade's handle and its error.
pub use error::{BoxError, Result};
pub use facade::Boxes;
