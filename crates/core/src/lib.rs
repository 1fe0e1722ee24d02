//! Shared foundations of agentbox: the agentbox home, ids, crash-safe metadata writes and
//! file locks. Every other crate builds on these so that durability and locking rules live in
//! exactly one place.

pub mod at;
pub mod atomic;
pub mod error;
pub mod exit;
pub mod failpoint;
pub mod glob;
pub mod home;
pub mod id;
pub mod lock;
pub mod mountinfo;
pub mod name;
mod newtype;
pub mod progress;
pub mod timing;
pub mod units;

pub use error::{Error, Result};
pub use home::Home;
