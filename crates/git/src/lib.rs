//! Git for boxes: a box made from a repository gets a repository of its own, on a fresh
//! branch `agentbox/<box>`, holding exactly what the user sees — the commit, staged and
//! unstaged changes, untracked files — while the host's checkout stays untouched.
//!
//! The box's repository shares the host's objects read-only (`objects/info/alternates`), so
//! nothing is copied — or, for a box that cannot reach them (a remote engine), is shipped
//! its own shallow copy (`ship`); either way the host keeps its base commit alive with a ref
//! `refs/agentbox/<box>/base` (its GC can never drop what the box builds on). The only
//! things written to the host repository are refs under `refs/heads/agentbox/` and
//! `refs/agentbox/<box>/` (`base`, and `fetched`: the last commit [`fetch`]ed for the box),
//! while shipping `refs/agentbox-ship/<box>/`, and the objects `git stash create`, syncs
//! and fetches add. Everything shells out to the `git` command, as the user's own git would
//! run it — pushes and fetches with the user's own configuration and credentials, on the
//! host (never inside a box).
//!
//! `run` runs git; `host` finds the host's repositories; `seed` makes a box's repository
//! and pins its base; `branches` reads and removes the host's box refs; `from_box` takes a
//! box's branch into the host's repository; `remote` pushes and fetches; `ship` makes the
//! files and steps that seed a box which cannot borrow the host's objects (a remote
//! engine). Their public items are this crate's API, at its root.

mod branches;
mod error;
mod host;
mod remote;
mod run;
mod seed;
pub use branches::*;
pub use error::*;
pub use host::*;
pub use remote::*;
pub use seed::*;

mod from_box;
pub use from_box::*;

mod ship;
pub use ship::*;

mod to_box;
pub use to_box::*;
