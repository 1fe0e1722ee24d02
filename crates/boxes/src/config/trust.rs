//! Which layer may set which key: a key's trust class, and what an untrusted project
//! file's value of it comes to.
//!
//! A cloned repository is untrusted text, and its `agentbox.yaml` is part of it. So the
//! workspace layer (the `defaults:` block of the project's `agentbox.yaml`) is read as
//! untrusted unless the user trusted that exact file on the host (`agentbox trust`, see
//! [`super::trusted`]). An untrusted file:
//! * sets an [`Trust::Any`] key freely: the key changes only what happens inside the box or
//!   in its own history, which the box's own code controls anyway;
//! * sets a [`Trust::Stricter`] key only to a value at least as strict as what the user's
//!   layers (global, project, built-in) give: a lower limit, less network, more hidden;
//! * never sets a [`Trust::User`] key: where the broker sends the key, whether the key
//!   enters the box, which host data shows, what starts a box, where a push goes.
//!
//! Invariant: for every key, the effective value with an untrusted workspace file is at
//! least as strict as without it. What is ignored is a warning naming the file, the key and
//! `agentbox trust`.

use super::key::{Key, Stricter, Trust, Value};
use super::keys::NETWORKS;

/// Why (part of) an untrusted file's value was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refused {
    /// The key is [`Trust::User`].
    UserOnly,
    /// The value is looser than the user's.
    Looser,
    /// Entries that would show host paths.
    Shows,
}

impl Refused {
    pub fn describe(self) -> &'static str {
        match self {
            Refused::UserOnly => "only your own configuration may set it",
            Refused::Looser => {
                "a project file may only make a box stricter than your configuration"
            }
            Refused::Shows => "a project file may only hide host paths, not show them",
        }
    }
}

/// What an untrusted file's value of a key comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It applies, as this value.
    Apply(Value),
    /// Part of it applies (`applied`); `ignored` is the rest.
    Partly {
        applied: Value,
        ignored: Value,
        why: Refused,
    },
    /// It is ignored whole.
    Ignored(Refused),
}

/// What the value `given` of `key` in an untrusted file comes to, over `user` (the value
/// the user's layers give).
pub fn untrusted(key: &Key, user: Option<&Value>, given: Value) -> Outcome {
    if user == Some(&given) {
        return Outcome::Apply(given);
    }
    let rule = match key.trust {
        Trust::Any => return Outcome::Apply(given),
        Trust::User => return Outcome::Ignored(Refused::UserOnly),
        Trust::Stricter(rule) => rule,
    };
    let stricter = match (rule, user, &given) {
        (Stricter::Bool(strict), _, Value::Bool(b)) => *b == strict,
        (Stricter::Limit, None, _) => true,
        (Stricter::Limit, Some(u), g) => match (limit(u), limit(g)) {
            (Some(u), Some(g)) => g <= u,
            _ => false,
        },
        (Stricter::Network, u, Value::Str(g)) => {
            let u = match u {
                Some(Value::Str(u)) => u.as_str(),
                _ => "host",
            };
            network_rank(g) >= network_rank(u)
        }
        (Stricter::HideOnly, u, Value::List(items)) => {
            let (hides, shows): (Vec<String>, Vec<String>) =
                items.iter().cloned().partition(|i| i.starts_with('!'));
            let mut applied = match u {
                Some(Value::List(u)) => u.clone(),
                _ => Vec::new(),
            };
            applied.extend(hides.iter().cloned());
            return match (hides.is_empty(), shows.is_empty()) {
                (_, true) => Outcome::Apply(Value::List(applied)),
                (true, false) => Outcome::Ignored(Refused::Shows),
                (false, false) => Outcome::Partly {
                    applied: Value::List(applied),
                    ignored: Value::List(shows),
                    why: Refused::Shows,
                },
            };
        }
        _ => false,
    };
    if stricter {
        Outcome::Apply(given)
    } else {
        Outcome::Ignored(Refused::Looser)
    }
}

/// A limit's size, for comparing (bytes, processes or cores).
fn limit(v: &Value) -> Option<f64> {
    match v {
        Value::Size { bytes, .. } => Some(*bytes as f64),
        Value::U64(n) => Some(*n as f64),
        Value::F64(f) => Some(*f),
        _ => None,
    }
}

/// How strict a network mode is: its place in [`NETWORKS`] read as host < private < none.
fn network_rank(mode: &str) -> u8 {
    debug_assert!(NETWORKS.contains(&mode));
    match mode {
        "none" => 2,
        "private" => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::{key, KEYS};

    fn k(name: &str) -> &'static Key {
        key(name).expect("key")
    }

    fn list(items: &[&str]) -> Value {
        Value::List(items.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn user_only_keys_are_ignored_unless_equal() {
        let up = Value::Str("http://127.0.0.1:9/".into());
        assert_eq!(
            untrusted(k("broker.anthropicUpstream"), None, up.clone()),
            Outcome::Ignored(Refused::UserOnly)
        );
        assert_eq!(
            untrusted(k("broker.anthropicUpstream"), Some(&up), up.clone()),
            Outcome::Apply(up)
        );
    }

    #[test]
    fn switches_go_one_way() {
        let yes = Value::Bool(true);
        let no = Value::Bool(false);
        let broker = k("agents.broker");
        assert_eq!(
            untrusted(broker, Some(&yes), no.clone()),
            Outcome::Ignored(Refused::Looser)
        );
        assert_eq!(
            untrusted(broker, Some(&no), yes.clone()),
            Outcome::Apply(yes.clone())
        );
        assert_eq!(
            untrusted(k("git.withEnv"), Some(&no), yes),
            Outcome::Ignored(Refused::Looser)
        );
    }

    #[test]
    fn limits_only_go_down_and_networks_only_close() {
        let size = |b: u64| Value::Size {
            text: b.to_string(),
            bytes: b,
        };
        let mem = k("box.memory");
        assert_eq!(untrusted(mem, None, size(5)), Outcome::Apply(size(5)));
        assert_eq!(
            untrusted(mem, Some(&size(4)), size(5)),
            Outcome::Ignored(Refused::Looser)
        );
        assert_eq!(
            untrusted(mem, Some(&size(6)), size(5)),
            Outcome::Apply(size(5))
        );
        assert_eq!(
            untrusted(k("box.cpus"), Some(&Value::F64(1.0)), Value::F64(0.5)),
            Outcome::Apply(Value::F64(0.5))
        );
        let net = k("box.network");
        let s = |t: &str| Value::Str(t.into());
        assert_eq!(
            untrusted(net, Some(&s("host")), s("none")),
            Outcome::Apply(s("none"))
        );
        assert_eq!(
            untrusted(net, Some(&s("private")), s("none")),
            Outcome::Apply(s("none"))
        );
        assert_eq!(
            untrusted(net, Some(&s("none")), s("private")),
            Outcome::Ignored(Refused::Looser)
        );
        assert_eq!(
            untrusted(net, Some(&s("private")), s("host")),
            Outcome::Ignored(Refused::Looser)
        );
    }

    #[test]
    fn path_lists_only_hide_more() {
        let hp = k("box.hostPaths");
        let user = list(&["/srv/data", "!/opt/x"]);
        assert_eq!(
            untrusted(hp, Some(&user), list(&["!/opt/y"])),
            Outcome::Apply(list(&["/srv/data", "!/opt/x", "!/opt/y"]))
        );
        assert_eq!(
            untrusted(hp, Some(&user), list(&["/home", "!/opt/y"])),
            Outcome::Partly {
                applied: list(&["/srv/data", "!/opt/x", "!/opt/y"]),
                ignored: list(&["/home"]),
                why: Refused::Shows,
            }
        );
        assert_eq!(
            untrusted(k("box.homeTools"), Some(&list(&[])), list(&[".config"])),
            Outcome::Ignored(Refused::Shows)
        );
        // An empty list in the file cannot drop the user's own hiding entries.
        assert_eq!(
            untrusted(hp, Some(&user), list(&[])),
            Outcome::Apply(user.clone())
        );
    }

    #[test]
    fn every_stricter_rule_fits_its_keys_type() {
        use crate::config::key::Kind;
        for key in KEYS {
            let fits = match key.trust {
                Trust::Any | Trust::User => true,
                Trust::Stricter(Stricter::Bool(_)) => key.kind == Kind::Bool,
                Trust::Stricter(Stricter::Limit) => {
                    matches!(key.kind, Kind::U64 | Kind::F64 | Kind::Size)
                }
                Trust::Stricter(Stricter::Network) => key.name == "box.network",
                Trust::Stricter(Stricter::HideOnly) => key.kind == Kind::List,
            };
            assert!(fits, "{}: {:?}", key.name, key.trust);
        }
    }
}
