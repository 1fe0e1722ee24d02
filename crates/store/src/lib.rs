//! The versioned environment store.
//!
//! One store per agentbox home holds the nodes of every environment, so forking or
//! checkpointing never copies data. See `node` for the metadata format, `backend` for how
//! layers are stored, and `store` for the on-disk layout.

pub mod backend;
pub mod bundle;
pub mod error;
pub mod fsops;
pub mod node;
pub mod setup;

pub use error::{Error, Result};
