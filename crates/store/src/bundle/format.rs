//! Constants and manifest types of the bundle format (see `docs/bundle-format.md`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Value of the manifest's `format` field.
pub const FORMAT_NAME: &str = "agentbox-bundle";
/// The manifest version this code writes. Version 2 records each layer's entry count and
/// checksum in `end.json`, after the layer, so that a layer can be written while its tree
/// is still being read; version 1 recorded them in the manifest, before the layer.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest manifest version this code reads.
pub const OLDEST_READ_VERSION: u32 = 1;
/// First entry of a history or snapshot bundle.
pub const MANIFEST_NAME: &str = "manifest.json";
/// Last entry of a history or snapshot bundle.
pub const END_NAME: &str = "end.json";
/// Directory holding one sub-directory (a layer) per node.
pub const NODES_DIR: &str = "nodes";
/// Name prefix of a whiteout (deletion) marker.
pub const WHITEOUT_PREFIX: &str = ".wh.";
/// Name of the opaque-directory marker.
pub const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// PAX record: blake3 hex of the entry's payload as stored in the archive.
pub const PAX_BLAKE3: &str = "AGENTBOX.blake3";
/// PAX record: sparse map `<size>:<off>+<len>,...` of a file stored as its data segments.
pub const PAX_SPARSE: &str = "AGENTBOX.sparse";
/// PAX record: the real file type of an entry whose tar type cannot express it. The only
/// value is [`PAX_TYPE_SOCKET`], on a fifo entry (type `6`).
pub const PAX_TYPE: &str = "AGENTBOX.type";
/// Value of [`PAX_TYPE`] for a Unix socket.
pub const PAX_TYPE_SOCKET: &str = "socket";
/// PAX record prefix of an extended attribute (as written by GNU tar and read by docker).
pub const PAX_XATTR_PREFIX: &str = "SCHILY.xattr.";
/// PAX key prefix of an xattr whose value contains a newline, hex-encoded. Common tar
/// readers split PAX data on newlines, so such values cannot travel as `SCHILY.xattr.`.
pub const PAX_XATTR_HEX_PREFIX: &str = "AGENTBOX.xattr.hex.";
/// Layer name used by [`super::import`] for a rootfs bundle.
pub const ROOTFS_LAYER: &str = "rootfs";
/// The overlayfs xattr marking an opaque directory.
pub const OVERLAY_OPAQUE_XATTR: &str = "trusted.overlay.opaque";
/// Prefix of every overlayfs-private xattr.
pub const OVERLAY_XATTR_PREFIX: &str = "trusted.overlay.";

/// What a bundle holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BundleKind {
    /// Several nodes of one environment, each stored as a layer over its base.
    History,
    /// One complete node.
    Snapshot,
    /// A plain tar of one complete tree, as `docker import` accepts.
    Rootfs,
}

impl BundleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BundleKind::History => "history",
            BundleKind::Snapshot => "snapshot",
            BundleKind::Rootfs => "rootfs",
        }
    }
}

impl fmt::Display for BundleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BundleKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "history" => Ok(BundleKind::History),
            "snapshot" => Ok(BundleKind::Snapshot),
            "rootfs" => Ok(BundleKind::Rootfs),
            other => Err(format!(
                "unknown bundle kind {other:?} (expected history, snapshot or rootfs)"
            )),
        }
    }
}

/// Compression of the tar stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        })
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "tar" => Ok(Compression::None),
            "gzip" | "gz" => Ok(Compression::Gzip),
            "zstd" | "zst" => Ok(Compression::Zstd),
            other => Err(format!(
                "unknown compression {other:?} (expected none, gzip or zstd)"
            )),
        }
    }
}

/// The first entry of a history or snapshot bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub version: u32,
    pub kind: BundleKind,
    pub created: DateTime<Utc>,
    /// Name of the exported environment.
    pub env: String,
    /// Node id of the environment's head.
    pub head: String,
    /// Tag name → node id.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Nodes in topological order, parents first.
    pub nodes: Vec<ManifestNode>,
}

/// One node of a manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestNode {
    pub id: String,
    pub parent: Option<String>,
    pub seq: u64,
    pub message: String,
    #[serde(default)]
    pub command: Option<String>,
    pub created: DateTime<Utc>,
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Node whose tree this node's layer is a diff against; `None`: the layer is complete.
    pub base: Option<String>,
    /// Version 1 only: number of tar entries in the node's layer (markers included).
    /// Version 2 records it in [`EndRecord::layers`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
    /// Version 1 only: blake3 hex over the layer's entry records (see
    /// [`super::layer_summary`]). Version 2 records it in [`EndRecord::layers`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// The last entry of a history or snapshot bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndRecord {
    pub nodes: u64,
    pub entries: u64,
    /// Version 2: each layer's entry count and checksum, in the manifest's node order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerEnd>,
}

/// Entry count and checksum of one node's layer, as `end.json` records them (version 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerEnd {
    pub id: String,
    /// Number of tar entries in the layer (markers included).
    pub entries: u64,
    /// blake3 hex over the layer's entry records (see [`super::layer_summary`]).
    pub checksum: String,
}

impl Manifest {
    /// An empty manifest of `kind` for environment `env`, created now.
    pub fn new(kind: BundleKind, env: &str, head: &str) -> Manifest {
        Manifest {
            format: FORMAT_NAME.to_owned(),
            version: FORMAT_VERSION,
            kind,
            created: Utc::now(),
            env: env.to_owned(),
            head: head.to_owned(),
            tags: BTreeMap::new(),
            nodes: Vec::new(),
        }
    }

    /// The node `id`, if listed.
    pub fn node(&self, id: &str) -> Option<&ManifestNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Check the structural rules of the format; the error says which rule is broken.
    pub fn validate(&self) -> Result<(), String> {
        if self.format != FORMAT_NAME {
            return Err(format!(
                "manifest format is {:?}, expected {FORMAT_NAME:?}",
                self.format
            ));
        }
        if !(OLDEST_READ_VERSION..=FORMAT_VERSION).contains(&self.version) {
            return Err(format!(
                "unsupported bundle version {} (this agentbox supports versions \
                 {OLDEST_READ_VERSION} to {FORMAT_VERSION})",
                self.version
            ));
        }
        match self.kind {
            BundleKind::Rootfs => {
                return Err("a rootfs bundle has no manifest".to_owned());
            }
            BundleKind::Snapshot => {
                if self.nodes.len() != 1 {
                    return Err(format!(
                        "a snapshot bundle holds exactly one node, this one lists {}",
                        self.nodes.len()
                    ));
                }
            }
            BundleKind::History => {
                if self.nodes.is_empty() {
                    return Err("a history bundle lists no node".to_owned());
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for n in &self.nodes {
            if !is_safe_id(&n.id) {
                return Err(format!("invalid node id {:?}", n.id));
            }
            if self.kind == BundleKind::Snapshot && (n.parent.is_some() || n.base.is_some()) {
                return Err(format!(
                    "node {} of a snapshot bundle must have neither parent nor base",
                    n.id
                ));
            }
            if let Some(p) = &n.parent {
                if !seen.contains(p.as_str()) && self.nodes.iter().any(|m| &m.id == p) {
                    return Err(format!(
                        "node {} is listed before its parent {p} (nodes must be in topological order)",
                        n.id
                    ));
                }
            }
            if let Some(b) = &n.base {
                if !seen.contains(b.as_str()) {
                    return Err(format!("base {b} of node {} is not listed before it", n.id));
                }
            }
            if !seen.insert(n.id.as_str()) {
                return Err(format!("node {} is listed twice", n.id));
            }
            // Where each layer's count and checksum live depends on the version: exactly
            // one place, so that a reader never has two to choose from.
            let in_manifest = n.entries.is_some() || n.checksum.is_some();
            if self.version == 1 && (n.entries.is_none() || n.checksum.is_none()) {
                return Err(format!(
                    "node {} has no entry count or checksum (version 1 records them in the manifest)",
                    n.id
                ));
            }
            if self.version >= 2 && in_manifest {
                return Err(format!(
                    "node {} carries an entry count or checksum in the manifest (version {} \
                     records them in {END_NAME})",
                    n.id, self.version
                ));
            }
        }
        if !self.nodes.iter().any(|n| n.id == self.head) {
            return Err(format!("head {} is not among the nodes", self.head));
        }
        for (tag, id) in &self.tags {
            // Exactly the rule `agentbox tag` applies: a tag becomes a key of the
            // environment's state and a name users type, so the archive gets no leeway.
            if let Err(e) = crate::names::validate("tag", tag) {
                let reason = match e {
                    crate::Error::InvalidName { reason, .. } => reason,
                    other => other.to_string(),
                };
                return Err(format!("invalid tag name {tag:?}: {reason}"));
            }
            if !seen.contains(id.as_str()) {
                return Err(format!(
                    "tag {tag:?} points to {id}, which is not among the nodes"
                ));
            }
        }
        Ok(())
    }
}

/// A node id usable as one path component.
pub(crate) fn is_safe_id(id: &str) -> bool {
    !id.is_empty()
        && id != "."
        && id != ".."
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}
