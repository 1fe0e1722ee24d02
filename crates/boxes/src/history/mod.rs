//! What a box's history is used for beyond commit and checkout: reading, naming and
//! dropping its nodes (`nodes`), a new box from one of its nodes (`fork`), candidates raced
//! in forks and judged by a test (`tournament`), and its branches pushed to and pulled from
//! their remotes (`remote`).
//!
//! It builds on the lifecycle (a fork is made like a box is created) and never the reverse.
//! Writes a running box must serialise with its auto-capture go through the façade's
//! provider operations; what here goes to the store directly relies on the store's own
//! locks.

pub mod fork;
pub mod nodes;
pub mod remote;
pub mod tournament;
