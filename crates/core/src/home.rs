//! The agentbox home: the one directory that holds every piece of agentbox state.
//!
//! Layout (each owner documents its own part):
//! ```text
//! $AGENTBOX_HOME/            default ~/.agentbox
//!   store/                   the versioned store (see agentbox-store)
//!   config.yaml              global configuration
//!   projects/<key>/          per-project state: config.yaml, the box index counter
//! ```
//!
//! A project's `<key>` is the first 16 hex digits of the BLAKE3 hash of its root's absolute
//! path (see [`Home::project_dir`]).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Resolved location of the agentbox home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// The home named by `$AGENTBOX_HOME`, else `~/.agentbox`.
    pub fn from_env() -> Result<Home> {
        if let Some(dir) = std::env::var_os("AGENTBOX_HOME").filter(|v| !v.is_empty()) {
            return Ok(Home::at(PathBuf::from(dir)));
        }
        let home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .ok_or(Error::NoHome)?;
        Ok(Home::at(PathBuf::from(home).join(".agentbox")))
    }

    /// A home at an explicit directory (tests, `--home`).
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of the versioned store.
    pub fn store_dir(&self) -> PathBuf {
        self.root.join("store")
    }

    /// Directory of per-project state for the project rooted at `root` (an absolute,
    /// canonical path): `projects/<first 16 hex digits of blake3(root)>`.
    pub fn project_dir(&self, root: &Path) -> PathBuf {
        self.root.join("projects").join(project_key(root))
    }
}

/// The key naming a project's state directory: 16 hex digits of the BLAKE3 hash of its root.
pub fn project_key(root: &Path) -> String {
    let h = blake3::hash(root.as_os_str().as_encoded_bytes());
    h.to_hex()[..16].to_owned()
}
