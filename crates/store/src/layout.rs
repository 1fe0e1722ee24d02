//! On-disk layout of a store. One place names every path so no module guesses another's.
//!
//! ```text
//! store/
//!   store.json            StoreConfig: format version, backend, max chain depth
//!   store.lock            flock: shared by commits/checkouts, exclusive by gc/delete/retain/fsck
//!   nodes/<id>.json       node metadata (see `node`)
//!   layers/<id>/          layer data (owned by the backend)
//!   layers/<id>.json      LayerRecord; a layer dir without a record is half-made garbage
//!   layers/<id>.paths     the layer's listing (see `listing`): what a derive matches its
//!                         cleanup against; optional, rebuilt by a walk when missing
//!   envs/<name>/env.json  EnvState: head, tags, next sequence number, mount point
//!   envs/<name>/lock      flock of the environment's single writer
//!   envs/<name>/work/     the backend's working area
//!   refs/<ns>/[<dir>/…]<name>  store-wide named refs (checkpoints/<project>/<name>): a
//!                         node id per file; a root for GC and retention
//!   tmp/                  staging of imports; emptied by reconcile
//!   index/ids/<ab>/<id>   id fan-out (see `index`): an empty file per node, `<ab>` its
//!                         first two hex digits; what a lookup by id prefix reads
//!   inflight/<pid>-<rand> intent marker of a holder of store.lock (see `inflight`): one
//!                         left behind is what makes opening run the full reconcile
//! ```
//!
//! Format 2 (`store.json`'s `format`) has the index and each `env.json` carries `tips`;
//! format 1 has neither and is migrated when first opened (see `index`).

use std::path::{Path, PathBuf};

use crate::backend::WorkDirs;

#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn config(&self) -> PathBuf {
        self.root.join("store.json")
    }
    pub fn lock(&self) -> PathBuf {
        self.root.join("store.lock")
    }
    pub fn nodes(&self) -> PathBuf {
        self.root.join("nodes")
    }
    pub fn node(&self, id: &str) -> PathBuf {
        self.nodes().join(format!("{id}.json"))
    }
    pub fn layers(&self) -> PathBuf {
        self.root.join("layers")
    }
    pub fn layer_record(&self, id: &str) -> PathBuf {
        self.layers().join(format!("{id}.json"))
    }
    pub fn envs(&self) -> PathBuf {
        self.root.join("envs")
    }
    pub fn env_dir(&self, name: &str) -> PathBuf {
        self.envs().join(name)
    }
    pub fn env_state(&self, name: &str) -> PathBuf {
        self.env_dir(name).join("env.json")
    }
    pub fn env_lock(&self, name: &str) -> PathBuf {
        self.env_dir(name).join("lock")
    }
    pub fn work_dirs(&self, name: &str, mountpoint: Option<&Path>) -> WorkDirs {
        WorkDirs {
            work: self.env_dir(name).join("work"),
            mountpoint: mountpoint.map(Path::to_owned),
            base: None,
            box_stopped: false,
        }
    }
    pub fn refs(&self) -> PathBuf {
        self.root.join("refs")
    }
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
    /// `released/<provider>`: the objects of held layers GC freed that their provider has
    /// not removed yet (see `crate::held`).
    pub fn released(&self, by: &str) -> PathBuf {
        self.root.join("released").join(by)
    }
    pub fn index(&self) -> PathBuf {
        self.root.join("index")
    }
    pub fn index_ids(&self) -> PathBuf {
        self.index().join("ids")
    }
    /// The fan-out shard of ids starting like `id_or_prefix` (at least two hex digits).
    pub fn id_shard(&self, id_or_prefix: &str) -> PathBuf {
        self.index_ids().join(id_or_prefix.get(..2).unwrap_or("00"))
    }
    pub fn id_entry(&self, id: &str) -> PathBuf {
        self.id_shard(id).join(id)
    }
    pub fn inflight(&self) -> PathBuf {
        self.root.join("inflight")
    }
}
