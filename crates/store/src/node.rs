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
//! A *detached* node (`"detached": {"from": F, "how": "derive" | "flatten"}`) is made from
//! node `F` by [`crate::Store::derive`] or [`crate::Store::flatten`] without touching any
//! environment: it is in no environment's history (`env` names the environment it was made
//! in, `seq` is 0 and means nothing, `parent` is `null`), and it lives exactly as long as
//! something names it — a store ref (the ref is written last: it is the operation's commit
//! point), an environment's HEAD or tag (a fork of it), or a child node. `from` records
//! provenance only: nothing follows it, and it may name a node deleted since.
//!
//! Deleting a node first replaces its file with a *tombstone* (`"deleted": {"reparent_to": P}`)
//! — the commit point — then rewrites each child's parent, then removes the tombstone. Opening
//! the store finishes any tombstone a crash left behind.

use std::collections::BTreeMap;

use agentbox_core::id::NodeId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Metadata of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    pub parent: Option<NodeId>,
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
    /// Present only on a detached node (see the module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached: Option<Detached>,
}

impl Node {
    /// Whether the node is part of environment `env`'s own history: committed there, not
    /// detached.
    pub fn in_history_of(&self, env: &str) -> bool {
        self.env == env && self.detached.is_none()
    }
}

/// How a detached node was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detached {
    /// The node it was made from (provenance only; may since have been deleted).
    pub from: NodeId,
    pub how: DetachedHow,
}

/// The operation that made a detached node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DetachedHow {
    /// [`crate::Store::derive`]: `from`'s tree with paths removed and files emptied.
    Derive,
    /// [`crate::Store::flatten`]: `from`'s tree in one complete layer.
    Flatten,
}

/// Marker of an interrupted deletion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tombstone {
    pub reparent_to: Option<NodeId>,
}
