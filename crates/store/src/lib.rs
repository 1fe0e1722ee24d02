//! The versioned environment store.
//!
//! One store per agentbox home holds the nodes of every environment, so forking or
//! checkpointing never copies data. See `node` for the metadata format, `backend` for how
//! layers are stored, and `store` for the on-disk layout.

pub mod backend;
pub mod bundle;
pub mod derive;
pub mod discard;
pub mod disk;
pub mod error;
pub mod fsops;
pub mod gc;
pub mod held;
pub mod history;
pub(crate) mod index;
pub mod inflight;
pub mod layout;
pub mod leftovers;
pub(crate) mod listing;
pub mod mounts;
pub mod names;
pub mod node;
pub mod patch;
pub mod retention;
pub mod setup;
pub mod store;
pub mod transfer;

pub use backend::{BackendKind, ChangeHint, MarksVersion};
pub use derive::{Cleanup, CleanupPlan, Derived, DetachOpts};
pub use error::{Error, Result};
pub use held::Held;
pub use inflight::StoreLock;
pub use node::{DetachedHow, Node};
pub use store::{CommitOpts, EnvState, Source, Store};
