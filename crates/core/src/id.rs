//! Random identifiers.
//!
//! Ids are lowercase hex. Tags must contain a non-hex character so they can never be
//! mistaken for an id or an id prefix; environment and box names are looked up before id
//! prefixes and may be all hex, but never a prefix of an existing id (see the store's
//! `names`).

/// Length in hex characters of a node or layer id (64 random bits).
pub const ID_LEN: usize = 16;

/// Shortest id prefix accepted when resolving a reference.
pub const MIN_PREFIX: usize = 4;

/// A fresh random id of [`ID_LEN`] hex characters.
pub fn new_id() -> String {
    let mut bytes = [0u8; ID_LEN / 2];
    // The kernel's random source does not fail on any supported Linux once booted.
    getrandom::fill(&mut bytes).expect("the kernel random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// True when `s` consists only of lowercase hex digits (and is non-empty).
pub fn is_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// True when `s` has the exact shape of a full id.
pub fn is_full_id(s: &str) -> bool {
    s.len() == ID_LEN && is_hex(s)
}

/// A node's id: [`ID_LEN`] hex characters, random, never reused; also the name of its
/// file in the store (`nodes/<id>.json`).
///
/// Read from the store's own files as written (see [`NodeId::from_trusted`]); a string
/// from anywhere else becomes one only through [`NodeId::parse`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct NodeId(String);

impl NodeId {
    /// A fresh random id.
    #[allow(clippy::new_without_default)] // a default id would be a random one: not a default
    pub fn new() -> NodeId {
        NodeId(new_id())
    }

    /// `s` as an id when it has the exact shape of a full id (not a prefix, not a ref).
    pub fn parse(s: &str) -> Option<NodeId> {
        is_full_id(s).then(|| NodeId(s.to_owned()))
    }

    /// An id taken as written, unchecked: one read from the store's own files (a ref, an
    /// environment's tag, a node file's name), a validated bundle's manifest, or made by
    /// [`new_id`]. The store writes only ids there, and a record an older version wrote
    /// still reads.
    pub fn from_trusted(s: impl Into<String>) -> NodeId {
        NodeId(s.into())
    }
}

crate::newtype::string_newtype!(NodeId);

/// A box's id: [`ID_LEN`] hex characters, random, never reused.
#[derive(
    Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct BoxId(String);

impl BoxId {
    /// A fresh random id.
    pub fn random() -> BoxId {
        BoxId(new_id())
    }

    /// An id derived from `seed` (for records written before ids existed: stable across
    /// reads, of the same shape as a random one).
    pub fn derived(seed: &str) -> BoxId {
        let hash = blake3::hash(seed.as_bytes()).to_hex();
        BoxId(hash[..ID_LEN].to_owned())
    }

    /// Whether the record had no id (`Default`, before ids existed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

crate::newtype::string_newtype!(BoxId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_full_hex_and_distinct() {
        let a = new_id();
        let b = new_id();
        assert!(is_full_id(&a), "{a}");
        assert_ne!(a, b);
        assert!(!is_hex("v1.0"));
        assert!(!is_hex(""));
        assert!(is_hex("beef"));
    }

    #[test]
    fn node_ids_parse_only_full_ids() {
        let a = NodeId::new();
        assert!(is_full_id(&a), "{a}");
        assert_eq!(NodeId::parse(&a), Some(a.clone()));
        assert_eq!(NodeId::parse(&a[..MIN_PREFIX]), None);
        assert_eq!(NodeId::parse("checkpoints/x"), None);
        assert_eq!(NodeId::parse(&a.to_uppercase()), None);
        assert_eq!(serde_json::to_string(&a).expect("json"), format!("\"{a}\""));
    }
}
