//! Snapshot backends: where layers live and how an environment's working tree is made.
//!
//! Both backends implement [`Backend`] and pass the same conformance suite
//! (`tests/conformance.rs`).
//!
//! Vocabulary:
//! * a **layer** is an immutable directory under `store/layers/<id>/` owned by the backend;
//! * a **chain** is the list of layers whose union is a node's tree, top (newest) first. On
//!   `btrfs` every chain has length 1 (a layer is a complete read-only subvolume); on `layers`
//!   it is the node's own diff layer followed by its ancestors' layers up to the nearest
//!   flattened (complete) layer;
//! * the **work area** of an environment (`store/envs/<name>/work/`) holds its writable state;
//!   the **mount point** is the user-visible directory (the overlay on `layers`, a bind mount
//!   of the writable subvolume on `btrfs`).

pub mod btrfs;
pub mod layers;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Result;

/// Which backend a store uses. Recorded in `store/store.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Btrfs,
    Layers,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Btrfs => "btrfs",
            BackendKind::Layers => "layers",
        })
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "btrfs" => Ok(BackendKind::Btrfs),
            "layers" => Ok(BackendKind::Layers),
            other => Err(format!(
                "unknown backend {other:?} (expected btrfs or layers)"
            )),
        }
    }
}

/// What the backend records about a layer, stored in `store/layers/<id>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    pub id: String,
    /// Layer below this one, `None` when the layer is complete on its own.
    pub parent: Option<String>,
    /// Number of layers in the chain ending here (1 for a complete layer).
    pub depth: u32,
}

/// Directories of one environment's working state.
#[derive(Debug, Clone)]
pub struct WorkDirs {
    /// `store/envs/<name>/work`: private to the backend.
    pub work: PathBuf,
    /// The user-visible directory.
    pub mountpoint: PathBuf,
}

/// A snapshot backend.
pub trait Backend: Send + Sync + fmt::Debug {
    fn kind(&self) -> BackendKind;

    /// Directory of layer `id`.
    fn layer_dir(&self, id: &str) -> PathBuf;

    /// Create layer `id` as an exact copy of the tree at `src` (complete layer).
    fn layer_from_dir(&self, src: &Path, id: &str) -> Result<LayerRecord>;

    /// Create layer `id` holding an empty tree.
    fn empty_layer(&self, id: &str) -> Result<LayerRecord>;

    /// Make the working area of an environment hold the tree of `chain` (top first), replacing
    /// whatever it held, and mount it at the mount point. Used by create and checkout.
    fn reset_work(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()>;

    /// Freeze the current working tree as layer `id`. `chain` is the chain the working area
    /// was last reset to or committed as (HEAD's chain). Must be safe while other processes
    /// write to the mount point: the layer is a consistent-per-file copy.
    fn commit(&self, dirs: &WorkDirs, chain: &[LayerRecord], id: &str) -> Result<LayerRecord>;

    /// (Re)mount the mount point after a reboot, for HEAD's chain.
    fn mount(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()>;

    /// Unmount the mount point (no error when not mounted).
    fn unmount(&self, dirs: &WorkDirs) -> Result<()>;

    /// Remove an environment's working area (after unmount).
    fn remove_work(&self, dirs: &WorkDirs) -> Result<()>;

    /// Remove a layer's data. The caller guarantees nothing references it.
    fn remove_layer(&self, id: &str) -> Result<()>;
}
