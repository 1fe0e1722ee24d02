//! Validation of user-chosen names (environments, tags, store-wide refs).
//!
//! Invariant: a valid name can never be mistaken for a node id or an id prefix, because it
//! must contain at least one character that is not a lowercase hex digit. `HEAD` (and
//! `HEAD~N`) is reserved for the environment's current node.

use crate::{Error, Result};

/// Check a name: 1–64 characters of `[A-Za-z0-9._-]`, starting with a letter or digit, not
/// all lowercase hex, not `HEAD`.
pub fn validate(kind: &str, name: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::InvalidName {
            name: name.to_owned(),
            reason: format!("{kind} {reason}"),
        })
    };
    if name.is_empty() || name.len() > 64 {
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
    if agentbox_core::id::is_hex(name) {
        return bad("names must contain a character other than 0-9 and a-f, so they cannot be mistaken for a node id");
    }
    if name == "HEAD" || name.starts_with("HEAD~") || name.starts_with("HEAD^") {
        return bad("names cannot be HEAD (it always means the current node)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn names() {
        for ok in ["v1", "before-install", "web", "x.y_z", "0day"] {
            validate("tag", ok).expect(ok);
        }
        for bad in [
            "", "beef", "0123", "-x", "a/b", "HEAD", "HEAD~1", "a b", ".hidden",
        ] {
            assert!(validate("tag", bad).is_err(), "{bad:?} must be rejected");
        }
    }
}
