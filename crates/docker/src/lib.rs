//! agentbox's Docker engine client.
//!
//! What a Docker box needs from an engine, and nothing of agentbox's own model: which engine
//! to talk to ([`endpoint`]: a `--docker-host` flag, a named host from the configuration,
//! `DOCKER_HOST`, the current docker context, the default socket), the connection and its
//! version check ([`engine`]), images ([`image`]: inspect, import of a root filesystem, tag,
//! remove; [`image_build`]: a Dockerfile built under the fingerprint of its context), containers ([`container`]: created hardened, started, stopped, removed), commands
//! in them ([`exec`]: exact argv, stdio, exit status; [`detached`]: left running), whether one
//! just started stays up ([`settle`]), files copied into them ([`archive`]) and out of them ([`download`], part of one: [`range`]),
//! what changed in them ([`changes`]) and commits ([`commit`]); an
//! `ssh://` engine is reached through the system's `ssh` ([`ssh`]), a `tcp://` one with TLS
//! on keep-alive connections (`tls`).
//!
//! The Engine API is spoken with `bollard`; nothing here runs the `docker` CLI. The API is
//! asynchronous, agentbox is not: an [`engine::Engine`] owns a single-threaded runtime and
//! every operation blocks on it.
//!
//! Rule: every error names the engine it came from (see [`error::DockerError`]), because a
//! user driving boxes on several engines must know which one failed.

pub mod archive;
pub mod changes;
pub mod commit;
pub mod container;
pub mod detached;
pub mod download;
pub mod endpoint;
pub mod engine;
pub mod error;
pub mod exec;
pub mod export;
pub mod image;
pub mod image_build;
pub mod range;
pub mod save;
pub mod settle;
pub mod ssh;
mod tls;
mod upload;

pub use endpoint::Endpoint;
pub use engine::Engine;
pub use error::{DockerError, Result};
