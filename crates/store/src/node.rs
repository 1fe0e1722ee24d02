//! Node metadata and its on-disk format.
//!
//! A node is an immutable snapshot of an environment's layer. Its metadata lives in
//! `store/nodes/<id>.json` (written atomically, once; only `parent` is ever rewritten, when an
//! ancestor is deleted or thinned). The data lives in a *layer* (`store/layers/<layer>`),
//! owned by the backend. Nodes and layers are separate so that deleting a node from the
//! history never breaks the data of its descendants: on the `layers` backend a child's layer
//! chain may still run through the deleted node's layer, which GC frees only once no chain
//! references it.
//!
//! ```json
//! { "id": "9f2c…", "parent": "41aa…" | null, "env": "demo", "seq": 12,
//!   "layer": "9f2c…", "message": "…", "command": "npm install" | null,
//!   "created": "2026-11-30T09:00:00Z", "metadata": { … } }
//! ```
//!
//! Deleting a node first replaces its file with a *tombstone* (`"deleted": {"reparent_to": P}`)
//! — the commit point — then rewrites each child's parent, then removes the tombstone. Opening
//! the store finishes any tombstone a crash left behind.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Metadata of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    pub parent: Option<String>,
    /// Environment the node was committed in.
    pub env: String,
    /// Position in its environment's history: strictly increasing, never reused. Retention
    /// thins by these stable positions.
    pub seq: u64,
    /// Layer holding the node's data.
    pub layer: String,
    pub message: String,
    #[serde(default)]
    pub command: Option<String>,
    pub created: DateTime<Utc>,
    /// Free-form metadata (later: git tips of the box's repositories).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Present only on a tombstone: the node is being deleted and its children move to
    /// `reparent_to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Tombstone>,
}

/// Marker of an interrupted deletion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tombstone {
    pub reparent_to: Option<String>,
}
