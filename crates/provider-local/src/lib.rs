//! The local provider: boxes as Linux namespaces on this host.
//!
//! Each running box has a supervisor process ([`supervisor`]) that owns its namespaces
//! (through the box's PID 1, see `agentbox_sandbox::init`), its process table, auto-capture
//! ([`capture`] over [`watch`]), restores under running processes ([`restore`]) and the
//! box's repositories, read inside the box ([`boxgit`]). The CLI and the domain reach it
//! only through [`local::LocalProvider`], the `agentbox_boxes::provider::Provider` it
//! implements, over the supervisor's socket ([`client`], [`proto`]; [`attach`] is the
//! caller's side of a session attach, [`terminal`] what both sides of one need to know
//! about terminals). [`prune`] finds what a crash of any of this left behind.

pub mod attach;
pub mod boxgit;
pub mod capture;
pub mod client;
pub mod held_files;
pub mod layer_watch;
pub mod local;
pub mod netns;
pub mod pipe_copy;
pub mod proto;
pub mod prune;
pub mod restore;
pub mod supervisor;
pub mod terminal;
pub mod watch;

pub use agentbox_boxes::{BoxError, Result};
pub use local::LocalProvider;
