//! A box's life, as the façade runs it: making one (`create`: settings over configuration
//! and the one transaction; `seeding`: its workspace from the project, repositories
//! included; `reseed`: from a checkpoint, moved to the host's present), then commit,
//! checkout, start, stop, processes, sessions, sync and destroy (`ops`), status (`status`), the
//! operations on versioned directories and the store as a whole (`directories`), and a
//! box seen by commands run in it for a front end that is no terminal (`files`: a command's
//! collected output, files read, written and listed; `copy`: trees in and out of a box as a
//! tar stream, `cp` and `download`), and `watch`: what changed in a home between two looks,
//! for a front end's event stream.
//!
//! `ops` sits on top: it calls the others and the checkpoints, never the reverse. A running
//! box is changed only through its provider — decided in `ops`, once; nothing here runs a
//! box's processes itself, and nothing below (records, configuration, checkpoints) calls
//! back up into it.

pub mod copy;
pub mod create;
pub mod directories;
pub mod files;
pub mod ops;
pub mod reseed;
pub mod seeding;
pub mod status;
pub mod watch;
