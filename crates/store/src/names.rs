//! Validation of user-chosen names (environments, boxes, tags, store-wide refs) as store
//! errors. The rules are [`agentbox_core::name::check`]'s; what this adds is that a new
//! name never equals a prefix of an existing id ([`check_not_id_prefix`]): what a name meant
//! when it was made stays what it means.

use agentbox_core::id;

use crate::{Error, Result};

/// Check a tag or ref name: 1–64 characters of `[A-Za-z0-9._-]`, starting with a letter or
/// digit, not all lowercase hex, not `HEAD`.
pub fn validate(kind: &str, name: &str) -> Result<()> {
    check(kind, name, Hex::Refused)
}

/// Check an environment's or a box's name: as [`validate`], except that it may be all
/// lowercase hex when shorter than a full id.
pub fn validate_env(kind: &str, name: &str) -> Result<()> {
    check(kind, name, Hex::ShorterThanId)
}

/// Check a store ref `NAMESPACE/NAME` or `NAMESPACE/DIR/…/NAME` (checkpoints are
/// `checkpoints/<project key>/<name>`): 2 to 8 components; the namespace and the last
/// component as [`validate`]; the ones between may be all hex at any length (a project key
/// is a hash), since a ref, holding a `/`, is never taken for an id.
pub fn validate_ref(full: &str) -> Result<Vec<&str>> {
    let parts: Vec<&str> = full.split('/').collect();
    if parts.len() < 2 || parts.len() > 8 {
        return Err(Error::InvalidName {
            name: full.to_owned(),
            reason:
                "store refs are named NAMESPACE/NAME or NAMESPACE/DIR/.../NAME (2 to 8 components)"
                    .into(),
        });
    }
    let last = parts.len() - 1;
    for (i, part) in parts.iter().enumerate() {
        match i {
            0 => validate("ref namespace", part)?,
            i if i == last => validate("ref", part)?,
            _ => check("ref component", part, Hex::Any)?,
        }
    }
    Ok(parts)
}

use agentbox_core::name::Hex;

fn check(kind: &str, name: &str, hex: Hex) -> Result<()> {
    agentbox_core::name::check(kind, name, hex).map_err(|e| Error::InvalidName {
        name: e.name,
        reason: format!("{} {}", e.kind, e.reason),
    })
}

/// Refuse a new name that equals a prefix of one of `ids` (one long enough to be taken
/// for an id prefix): it would take that prefix from the id it names today.
pub fn check_not_id_prefix<I, S>(kind: &str, name: &str, ids: I) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    if name.len() < id::MIN_PREFIX || !id::is_hex(name) {
        return Ok(());
    }
    match ids.into_iter().find(|i| i.as_ref().starts_with(name)) {
        Some(taken) => Err(Error::InvalidName {
            name: name.to_owned(),
            reason: format!(
                "{kind} names cannot be a prefix of an existing id ({} starts with it)",
                taken.as_ref()
            ),
        }),
        None => Ok(()),
    }
}

/// An environment name made from a directory's name: characters a name may not hold
/// become `-`, leading ones that may not start it are dropped, and it is cut to 64
/// characters (or lengthened past an id's). Always valid for [`validate_env`].
pub fn from_dir_name(dir: &str) -> String {
    let mapped: String = dir
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name: String = mapped
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(64)
        .collect();
    if name.is_empty() {
        name = "env".to_owned();
    }
    if name == "HEAD" || name.starts_with("HEAD~") || name.starts_with("HEAD^") {
        name = format!("env-{name}");
        name.truncate(64);
    }
    if id::is_hex(&name) && name.len() >= id::ID_LEN {
        name.truncate(60);
        name.push_str("-env");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::{check_not_id_prefix, from_dir_name, validate, validate_env};

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

    #[test]
    fn refs_have_a_namespace_and_a_name_and_hex_directories_between() {
        use super::validate_ref;
        assert_eq!(validate_ref("ns/name").expect("two"), ["ns", "name"]);
        validate_ref("checkpoints/0123456789abcdef0123/web-3").expect("a project key");
        for bad in [
            "name",
            "ns/",
            "/name",
            "ns//name",
            "ns/cafe",
            "cafe/name",
            "ns/a b/name",
            "ns/../name",
            "a/b/c/d/e/f/g/h/i",
        ] {
            assert!(validate_ref(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn environment_names_may_be_hex() {
        for ok in ["d", "cafe", "acc1", "0123", "web"] {
            validate_env("environment", ok).expect(ok);
        }
        for bad in ["0123456789abcdef", "", "-x", "HEAD", "a b"] {
            assert!(
                validate_env("environment", bad).is_err(),
                "{bad:?} must be rejected"
            );
        }
        let ids = ["cafe0123456789ab", "0000111122223333"];
        assert!(check_not_id_prefix("box", "cafe", ids).is_err());
        assert!(check_not_id_prefix("box", "cafe01", ids).is_err());
        check_not_id_prefix("box", "caf", ids).expect("shorter than a prefix");
        check_not_id_prefix("box", "beef", ids).expect("no such id");
        check_not_id_prefix("box", "cafe-x", ids).expect("not hex");
    }

    #[test]
    fn names_from_directories_are_valid() {
        for (dir, name) in [
            ("d", "d"),
            ("my app", "my-app"),
            (".hidden", "hidden"),
            ("...", "env"),
            ("HEAD", "env-HEAD"),
            ("0123456789abcdef", "0123456789abcdef-env"),
        ] {
            assert_eq!(from_dir_name(dir), name);
            validate_env("environment", name).expect(name);
        }
    }
}
