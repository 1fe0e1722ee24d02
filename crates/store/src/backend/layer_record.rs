//! A layer's record: what the store keeps about each layer besides its data.

use serde::{Deserialize, Serialize};

/// What the backend records about a layer, stored in `store/layers/<id>.json`
/// (`{"id": …, "parent": …, "depth": …}`, plus `"cleaned"` and `"compacted"` when set).
/// Beside it the layer may have a listing, `store/layers/<id>.paths` (see `crate::listing`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    pub id: String,
    /// Layer below this one, `None` when the layer is complete on its own.
    pub parent: Option<String>,
    /// Number of layers in the chain ending here (1 for a complete layer).
    pub depth: u32,
    /// Set on a layer made by [`crate::Store::derive`] (or flattened from one): the cleanup
    /// it applied. Invariant: the tree of this layer (on `layers` the merged tree of the
    /// chain ending here, on `btrfs` the subvolume) has no path a delete pattern of it
    /// matches and no non-empty regular file a truncate pattern matches. So a later derive
    /// whose patterns are all among these need not look at this layer or below it: what it
    /// could find there is already clean. Absent (`None`) in records written before the
    /// field existed and on every other layer; older versions ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaned: Option<crate::derive::Cleanup>,
    /// Set on a `layers` layer that folds several diff layers into one (a compaction of a
    /// chain at the maximum depth, see `backend::layers`): the next compaction folds only
    /// the layers above the topmost such one, until the chain holds too many of them.
    /// Absent (`false`) in records written before the field existed; older versions
    /// ignore it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
    /// Set on a layer a provider holds outside the store (see `crate::held`): no directory,
    /// and freeing it queues the object for its holder. Older versions ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<crate::held::Held>,
}

impl LayerRecord {
    /// The record of layer `id` over `parent` at `depth`, not made by a derive.
    pub fn new(id: &str, parent: Option<String>, depth: u32) -> LayerRecord {
        LayerRecord {
            id: id.to_owned(),
            parent,
            depth,
            cleaned: None,
            compacted: false,
            held: None,
        }
    }
}
