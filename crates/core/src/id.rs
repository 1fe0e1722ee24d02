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
}
