//! User-chosen names and the typed names and ids built from them.
//!
//! Invariants: a tag or ref name can never be mistaken for an id or an id prefix, because it
//! must contain at least one character that is not a lowercase hex digit. Environment and
//! box names are looked up by name before any id prefix, so they may be all hex (`d`,
//! `cafe`, `acc1`, as directories are named), but never the length of a full id. `HEAD`
//! (and `HEAD~N`) is reserved for an environment's current node. These rules are checked
//! here and nowhere else: a [`BoxName`] is valid by construction.

use serde::{Deserialize, Serialize};

use crate::id;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid name {name:?}: {kind} {reason}")]
pub struct NameError {
    pub name: String,
    /// What the name was for (`box`, `tag`, …).
    pub kind: String,
    pub reason: String,
}

/// Longest name accepted.
pub const MAX_LEN: usize = 64;

/// Whether a name may consist of lowercase hex digits only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hex {
    /// Never (tags, refs: they resolve where ids do).
    Refused,
    /// When shorter than a full id (environments and boxes: names are tried first).
    ShorterThanId,
    /// At any length (the inner components of a store ref, which holds a `/`).
    Any,
}

/// Check `name` as a name of `kind`: 1–64 characters of `[A-Za-z0-9._-]`, starting with a
/// letter or digit, not `HEAD`; all lowercase hex only as `hex` allows.
pub fn check(kind: &str, name: &str, hex: Hex) -> Result<(), NameError> {
    let bad = |reason: &str| {
        Err(NameError {
            name: name.to_owned(),
            kind: kind.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() || name.len() > MAX_LEN {
        return bad("names must have 1 to 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("names may contain only letters, digits, '.', '_' and '-'");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return bad("names must start with a letter or a digit");
    }
    if id::is_hex(name) && hex == Hex::Refused {
        return bad("names must contain a character other than 0-9 and a-f, so they cannot be mistaken for a node id");
    }
    if id::is_hex(name) && hex == Hex::ShorterThanId && name.len() >= id::ID_LEN {
        return bad(&format!(
            "names of only 0-9 and a-f must be shorter than an id ({} characters)",
            id::ID_LEN
        ));
    }
    if name == "HEAD" || name.starts_with("HEAD~") || name.starts_with("HEAD^") {
        return bad("names cannot be HEAD (it always means the current node)");
    }
    Ok(())
}

/// A box's name: unique in the home; it names the box's environment, branch and directory.
/// Valid by construction ([`BoxName::new`]).
///
/// Read from a record as written (records are the host's own files, written through
/// [`BoxName::new`]), so a name an older version accepted still reads.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BoxName(String);

impl BoxName {
    /// `name` checked as a box name.
    pub fn new(name: impl Into<String>) -> Result<BoxName, NameError> {
        let name = name.into();
        check("box", &name, Hex::ShorterThanId)?;
        Ok(BoxName(name))
    }
}

crate::newtype::string_newtype!(BoxName);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_names_are_checked_once_at_construction() {
        for ok in ["d", "cafe", "acc1", "web-2", "x.y_z"] {
            assert_eq!(BoxName::new(ok).expect(ok).as_str(), ok);
        }
        for bad in ["", "-x", "a/b", "HEAD", "HEAD~1", "a b", "0123456789abcdef"] {
            let e = BoxName::new(bad).expect_err(bad);
            assert_eq!(e.name, bad);
            assert_eq!(e.kind, "box");
        }
        assert!(BoxName::new("x".repeat(65)).is_err());
    }

    #[test]
    fn tags_may_not_be_all_hex() {
        assert!(check("tag", "beef", Hex::Refused).is_err());
        assert!(check("tag", "v1", Hex::Refused).is_ok());
        assert!(check("ref component", "0123456789abcdef01", Hex::Any).is_ok());
    }
}
