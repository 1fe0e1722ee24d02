//! The key registry: every configuration key, its type, built-in default and description.
//!
//! [`KEYS`] is the single source of truth: the file reader, `agentbox config set`,
//! `agentbox config list` and the JSON schema all read it. Adding a key is one entry here
//! (plus a field of [`super::Effective`] when the product reads it). [`RENAMED_KEYS`] maps
//! old names to new ones; an old name in a file or on the command line is an error naming
//! the new one.
//!
//! One file (over 600 lines, about 135 of them tests): [`KEYS`] is the single source of
//! truth, and what reads it here (value parsing, suggestions, the schema) and the tests
//! read the table whole.
//!
//! # Which layer may set which key
//!
//! The user's layers (`<home>/config.yaml`, `<home>/projects/<key>/config.yaml`, flags)
//! may set every key. The workspace layer (the `defaults:` block of the project's
//! checked-in `agentbox.yaml`) is untrusted text unless the user ran `agentbox trust` on
//! that exact file; untrusted, it may set a key only as [`Key::trust`] says (see
//! [`super::trust`]), and what it may not set is ignored with a warning:
//!
//! | key | an untrusted project file may set it | why |
//! |---|---|---|
//! | `agents.broker` | only to `true` | `false` puts the real key in the agent's environment |
//! | `agents.skipPermissions` | only to `false` | the agent asks before acting |
//! | `box.broker` | only to `false` | a broker lets the box's commands spend the user's key |
//! | `box.capture` | yes | the box's own history |
//! | `box.cpus`, `box.memory`, `box.pids` | only to set a limit or a lower one | |
//! | `box.defaultCheckpoint` | no | it chooses what every new box starts from (a box-made checkpoint) |
//! | `box.env` | yes | variables inside the box, whose code can set any anyway |
//! | `box.hostPaths`, `box.homeTools` | only `!PATH` entries (hide more), added to the user's | showing host data or the home's tokens |
//! | `box.ignore`, `box.keep`, `checkpoint.cleanup`, `checkpoint.cleanupCommand`, `checkpoint.maxLayers` | yes | the box's own history and checkpoints (the command runs inside a capture of the box) |
//! | `box.image` | no | it chooses the box's whole base |
//! | `box.provider` | no | it chooses what isolates the box |
//! | `docker.hosts` | no | it chooses which engine a named host reaches |
//! | `box.network` | only to a stricter mode (none < private < host) | |
//! | `box.resyncOnStart`, `git.carry` | only to `false` | they carry the host's uncommitted work in |
//! | `broker.anthropicUpstream`, `broker.openaiUpstream` | no | where the broker sends the real key |
//! | `claude.isolateConfig`, `codex.isolateConfig`, `opencode.isolateConfig` | only to `true` | |
//! | `git.withEnv` | only to `false` | it copies secret-bearing files (`.env`) in |
//! | `git.envPatterns` | no | which ignored (secret) files `git.withEnv` copies in |
//! | `git.remote` | no | where `agentbox push` sends the box's work with the user's credentials |
//! | `session.detachKey` | no | the user's way out of an attached terminal |

use crate::cgroup::Limits;

use super::checks::*;
use super::key::{Key, Kind, Stricter, Trust, Value};

fn none() -> Option<Value> {
    None
}

fn yes() -> Option<Value> {
    Some(Value::Bool(true))
}

fn no() -> Option<Value> {
    Some(Value::Bool(false))
}

fn empty_list() -> Option<Value> {
    Some(Value::List(Vec::new()))
}

/// Default number of recent nodes retention keeps after automatic nodes (`box.keep`).
pub const DEFAULT_KEEP: u64 = 100;

/// Network modes of a box.
pub const NETWORKS: &[&str] = &["host", "none", "private"];

/// Every configuration key. Sorted by name (a unit test checks it), so listings are stable.
pub static KEYS: &[Key] = &[
    Key {
        name: "agents.broker",
        kind: Kind::Bool,
        default: yes,
        description: "Agents that take a base URL (claude, codex) reach their API through the box's credential broker: the real key never enters the box",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(true)),
    },
    Key {
        name: "agents.skipPermissions",
        kind: Kind::Bool,
        default: yes,
        description: "Agents skip their own permission prompts in a box (the box is the sandbox); off: they ask, as with --ask",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(false)),
    },
    Key {
        name: "box.broker",
        kind: Kind::Bool,
        default: no,
        description: "Run a credential broker for the box: its commands get ANTHROPIC_BASE_URL / OPENAI_BASE_URL and a placeholder key, the host's real key (ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN, OPENAI_API_KEY, else <home>/credentials/) stays on the host",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(false)),
    },
    Key {
        name: "box.capture",
        kind: Kind::Bool,
        default: yes,
        description: "Auto-capture: record a node after every command that changed something",
        check: None,
        trust: Trust::Any,
    },
    Key {
        name: "box.cpus",
        kind: Kind::F64,
        default: none,
        description: "CPU time limit of a box, in cores (e.g. 1.5)",
        check: Some(check_cpus),
        trust: Trust::Stricter(Stricter::Limit),
    },
    Key {
        name: "box.defaultCheckpoint",
        kind: Kind::String,
        default: none,
        description: "The checkpoint new boxes of the project start from (see `agentbox checkpoint set-default`); unset: none",
        check: None,
        trust: Trust::User,
    },
    Key {
        name: "box.env",
        kind: Kind::List,
        default: empty_list,
        description: "Environment variables (KEY=VALUE) set in every command of a box",
        check: Some(check_env),
        trust: Trust::Any,
    },
    Key {
        name: "box.homeTools",
        kind: Kind::List,
        default: empty_list,
        description: "Paths below the host user's home a box sees besides the default toolchains and caches (.local/share/mytool), or defaults left out (!.pyenv); credentials never show",
        check: Some(check_home_tools),
        trust: Trust::Stricter(Stricter::HideOnly),
    },
    Key {
        name: "box.hostPaths",
        kind: Kind::List,
        default: empty_list,
        description: "Host paths a box sees besides the host's software (/srv/datasets), or hides too (!/opt/private); secrets never show",
        check: Some(check_host_paths),
        trust: Trust::Stricter(Stricter::HideOnly),
    },
    Key {
        name: "box.ignore",
        kind: Kind::List,
        default: empty_list,
        description: "Paths (relative to the box root, **/ for any depth) whose changes alone never make a node",
        check: None,
        trust: Trust::Any,
    },
    Key {
        name: "box.image",
        kind: Kind::String,
        default: none,
        description: "Base image of new boxes (see `agentbox image`); unset: the host's own /",
        check: None,
        trust: Trust::User,
    },
    Key {
        name: "box.keep",
        kind: Kind::U64,
        default: || Some(Value::U64(crate::config::keys::DEFAULT_KEEP)),
        description: "Retention: the newest N nodes stay when automatic nodes thin the history",
        check: None,
        trust: Trust::Any,
    },
    Key {
        name: "box.memory",
        kind: Kind::Size,
        default: none,
        description: "Memory limit of a box (RAM and swap together), e.g. 512M, 2G",
        check: Some(check_memory),
        trust: Trust::Stricter(Stricter::Limit),
    },
    Key {
        name: "box.network",
        kind: Kind::Enum(NETWORKS),
        default: || Some(Value::Str("host".into())),
        description: "Network of a box: host (the host's network), none (loopback only) or private (its own, with outbound access through pasta and published ports; the host's loopback out of reach)",
        check: None,
        trust: Trust::Stricter(Stricter::Network),
    },
    Key {
        name: "box.pids",
        kind: Kind::U64,
        default: none,
        description: "Most processes (and threads) a box may run at once",
        check: Some(check_pids),
        trust: Trust::Stricter(Stricter::Limit),
    },
    Key {
        name: "box.provider",
        kind: Kind::String,
        default: none,
        description: "Where new boxes run: local (namespaces on this machine, the default) or docker (a container on a Docker engine)",
        check: Some(check_provider),
        trust: Trust::User,
    },
    Key {
        name: "box.resyncOnStart",
        kind: Kind::Bool,
        default: yes,
        description: "A box made from a checkpoint gets the host's current uncommitted work (off: only its fresh branch at the host's commit)",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(false)),
    },
    Key {
        name: "broker.anthropicUpstream",
        kind: Kind::String,
        default: || Some(Value::Str(agentbox_broker::endpoint::DEFAULT_ANTHROPIC_UPSTREAM.into())),
        description: "Where a box's credential broker sends Anthropic API requests (https, or http to a loopback host)",
        check: Some(check_anthropic_upstream),
        trust: Trust::User,
    },
    Key {
        name: "broker.openaiUpstream",
        kind: Kind::String,
        default: || Some(Value::Str(agentbox_broker::endpoint::DEFAULT_OPENAI_UPSTREAM.into())),
        description: "Where a box's credential broker sends OpenAI API requests (https, or http to a loopback host)",
        check: Some(check_openai_upstream),
        trust: Trust::User,
    },
    Key {
        name: "checkpoint.cleanup",
        kind: Kind::List,
        default: empty_list,
        description: "More paths (from the box root, **/ for any depth) removed from a checkpoint's capture, besides temporary files, package lists, logs and shell histories",
        check: None,
        trust: Trust::Any,
    },
    Key {
        name: "checkpoint.cleanupCommand",
        kind: Kind::String,
        default: none,
        description: "A shell command run as root in a capture of a Docker box before it becomes a checkpoint (apt-get clean, say); its failure does not stop the checkpoint",
        check: None,
        trust: Trust::Any,
    },
    Key {
        name: "checkpoint.maxLayers",
        kind: Kind::U64,
        default: || Some(Value::U64(3)),
        description: "A checkpoint of a box whose lineage is this many checkpoints deep is flattened (self-contained)",
        check: None,
        trust: Trust::Any,
    },
    Key {
        name: "claude.isolateConfig",
        kind: Kind::Bool,
        default: no,
        description: "Accepted for compatibility: every box keeps its own copy of claude's configuration",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(true)),
    },
    Key {
        name: "codex.isolateConfig",
        kind: Kind::Bool,
        default: no,
        description: "Accepted for compatibility: every box keeps its own copy of codex's configuration",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(true)),
    },
    Key {
        name: "docker.hosts",
        kind: Kind::Map,
        default: none,
        description: "Named Docker engines for `--docker-host NAME`: NAME → URL (unix:///…, tcp://HOST:2376, ssh://USER@HOST); set one with `config set docker.hosts.NAME URL`",
        check: Some(check_docker_hosts),
        trust: Trust::User,
    },
    Key {
        name: "git.carry",
        kind: Kind::Bool,
        default: yes,
        description: "Carry the host's uncommitted and untracked work into a new box",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(false)),
    },
    Key {
        name: "git.envPatterns",
        kind: Kind::List,
        default: || Some(Value::List(agentbox_git::default_env_patterns())),
        description: "Ignored files copied into a new box when git.withEnv is on (file-name globs)",
        check: None,
        trust: Trust::User,
    },
    Key {
        name: "git.remote",
        kind: Kind::String,
        default: || Some(Value::Str("origin".into())),
        description: "The remote `agentbox push` pushes a box's branch to",
        check: None,
        trust: Trust::User,
    },
    Key {
        name: "git.withEnv",
        kind: Kind::Bool,
        default: no,
        description: "Also copy ignored secret-bearing files (git.envPatterns) into a new box",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(false)),
    },
    Key {
        name: "opencode.isolateConfig",
        kind: Kind::Bool,
        default: no,
        description: "Accepted for compatibility: every box keeps its own copy of opencode's configuration",
        check: None,
        trust: Trust::Stricter(Stricter::Bool(true)),
    },
    Key {
        name: "session.detachKey",
        kind: Kind::String,
        default: || Some(Value::Str(crate::sessions::DEFAULT_DETACH_KEY.into())),
        description: "The keys that detach `agentbox attach` from a session: one or two keys, each ctrl-X or a character (`ctrl-\\ d`: Ctrl-\\ then d), or none",
        check: Some(check_detach_key),
        trust: Trust::User,
    },
];

/// Keys that were renamed: `(old, new)`. An old name is refused with the new one.
pub static RENAMED_KEYS: &[(&str, &str)] = &[
    ("box.withEnv", "git.withEnv"),
    ("box.envPatterns", "git.envPatterns"),
];

/// The registry entry of `name`.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// The map key (see [`Kind::Map`]) `name` is a member of (`docker.hosts.big`), with the
/// member's name.
pub fn member(name: &str) -> Option<(&'static Key, &str)> {
    KEYS.iter().filter(|k| k.kind == Kind::Map).find_map(|k| {
        let m = name.strip_prefix(k.name)?.strip_prefix('.')?;
        check_member_name(m).is_ok().then_some((k, m))
    })
}

/// The new name of a renamed key.
pub fn renamed(name: &str) -> Option<&'static str> {
    RENAMED_KEYS
        .iter()
        .find(|(old, _)| *old == name)
        .map(|(_, new)| *new)
}

/// True when `name` is a section (`box`, `git`): the first part of some key.
pub fn is_section(name: &str) -> bool {
    KEYS.iter().any(|k| {
        k.name
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// The registered key closest to `name`, when it is close enough to be a likely typo
/// (case differences, a few letters off, or the right name in the wrong section).
pub fn suggest(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if let Some(k) = KEYS.iter().find(|k| k.name.to_ascii_lowercase() == lower) {
        return Some(k.name);
    }
    if let Some(new) = renamed(name) {
        return Some(new);
    }
    let best = KEYS
        .iter()
        .map(|k| (edit_distance(&lower, &k.name.to_ascii_lowercase()), k.name))
        .min()?;
    if best.0 <= 3.max(name.len() / 4) {
        return Some(best.1);
    }
    // `network` for `box.network`, `foo.keep` for `box.keep`.
    let leaf = lower.rsplit('.').next().unwrap_or(&lower);
    KEYS.iter()
        .find(|k| k.name.rsplit('.').next().map(str::to_ascii_lowercase) == Some(leaf.into()))
        .map(|k| k.name)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Why a value is refused: what was expected.
pub type Refusal = String;

/// Parse a value given as text (the command line) for a key of `kind`.
pub fn parse_text(key: &Key, text: &str) -> Result<Value, Refusal> {
    let v = match key.kind {
        Kind::Bool => Value::Bool(parse_bool(text).ok_or_else(|| expected(key))?),
        Kind::U64 => Value::U64(text.trim().parse().map_err(|_| expected(key))?),
        Kind::F64 => {
            let f: f64 = text.trim().parse().map_err(|_| expected(key))?;
            if !f.is_finite() {
                return Err(expected(key));
            }
            Value::F64(f)
        }
        Kind::Enum(words) => {
            let t = text.trim();
            if !words.contains(&t) {
                return Err(expected(key));
            }
            Value::Str(t.to_owned())
        }
        Kind::Size => {
            let bytes = Limits::parse_memory(text).map_err(|_| expected(key))?;
            Value::Size {
                text: text.trim().to_owned(),
                bytes,
            }
        }
        Kind::String => Value::Str(text.to_owned()),
        Kind::List => Value::List(vec![text.to_owned()]),
        Kind::Map => return Err(expected(key)),
    };
    checked(key, v)
}

/// Parse a value read from a file (YAML, seen as JSON) for a key.
pub fn parse_json(key: &Key, v: &serde_json::Value) -> Result<Value, Refusal> {
    use serde_json::Value as J;
    let parsed = match (key.kind, v) {
        // Text in a file is read like text on the command line (`keep: "5"`, `capture: "no"`).
        (Kind::List | Kind::Map, J::String(_)) => return Err(expected(key)),
        (Kind::Map, J::Object(members)) => {
            let mut out = std::collections::BTreeMap::new();
            for (name, v) in members {
                match v {
                    J::String(s) => out.insert(name.clone(), s.clone()),
                    _ => return Err(format!("{} ({name}: not a text)", expected(key))),
                };
            }
            Value::Map(out)
        }
        (_, J::String(s)) => return parse_text(key, s),
        (Kind::Bool, J::Bool(b)) => Value::Bool(*b),
        (Kind::U64, J::Number(n)) => Value::U64(n.as_u64().ok_or_else(|| expected(key))?),
        (Kind::F64, J::Number(n)) => Value::F64(n.as_f64().ok_or_else(|| expected(key))?),
        (Kind::Size, J::Number(n)) => {
            let bytes = n.as_u64().ok_or_else(|| expected(key))?;
            Value::Size {
                text: bytes.to_string(),
                bytes,
            }
        }
        // A number or bool where text is expected is still text (`image: 2024`).
        (Kind::String, J::Number(n)) => Value::Str(n.to_string()),
        (Kind::String, J::Bool(b)) => Value::Str(b.to_string()),
        (Kind::List, J::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    J::String(s) => out.push(s.clone()),
                    J::Number(n) => out.push(n.to_string()),
                    J::Bool(b) => out.push(b.to_string()),
                    _ => return Err(format!("{} (a list of texts)", expected(key))),
                }
            }
            Value::List(out)
        }
        _ => return Err(expected(key)),
    };
    checked(key, parsed)
}

/// Parse the values of `config set KEY VALUE...`. A list key takes its items as separate
/// arguments, or one argument holding a YAML/JSON list (`'[A=1, B=2]'`, `'[]'` for empty);
/// any other key takes exactly one argument.
pub fn parse_args(key: &Key, args: &[String]) -> Result<Value, Refusal> {
    match (key.kind, args) {
        (_, []) => Err(format!("{} needs a value: {}", key.name, expected(key))),
        (Kind::List, [one]) if one.trim_start().starts_with('[') => {
            let v: serde_json::Value = serde_saphyr::from_str(one).map_err(|e| {
                format!("{one:?} is not a YAML list: {}", first_line(&e.to_string()))
            })?;
            parse_json(key, &v)
        }
        (Kind::List, items) => checked(key, Value::List(items.to_vec())),
        // `NAME=VALUE` each.
        (Kind::Map, items) => {
            let mut out = std::collections::BTreeMap::new();
            for item in items {
                let (name, value) = item
                    .split_once('=')
                    .ok_or_else(|| format!("{item:?}: {}", expected(key)))?;
                out.insert(name.to_owned(), value.to_owned());
            }
            checked(key, Value::Map(out))
        }
        (_, [one]) => parse_text(key, one),
        (_, more) => Err(format!(
            "{} takes one value, got {}: {}",
            key.name,
            more.len(),
            more.join(" ")
        )),
    }
}

fn checked(key: &Key, v: Value) -> Result<Value, Refusal> {
    match key.check {
        Some(check) => check(&v).map(|()| v),
        None => Ok(v),
    }
}

/// The first line of a message (parser errors add a source snippet below it).
pub(crate) fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or(s);
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// What a key's values look like, for error messages.
pub fn expected(key: &Key) -> String {
    match key.kind {
        Kind::Bool => "expected true or false".into(),
        Kind::U64 => "expected a whole number (0 or more)".into(),
        Kind::F64 => "expected a number".into(),
        Kind::Enum(words) => format!("expected one of: {}", words.join(", ")),
        Kind::Size => "expected a size: bytes, or a number with K, M, G or T (e.g. 512M)".into(),
        Kind::String => "expected text".into(),
        Kind::List => "expected a list".into(),
        Kind::Map => "expected NAME=VALUE entries (or set one as KEY.NAME VALUE)".into(),
    }
}

/// The JSON schema (draft 2020-12) of a configuration file. Keys may be written nested
/// (`box: {network: none}`) or dotted (`box.network: none`); both spellings are described.
/// Unknown keys are allowed (they only cause a warning).
pub fn schema() -> serde_json::Value {
    use serde_json::{json, Map};
    let mut sections: Map<String, serde_json::Value> = Map::new();
    let mut flat: Map<String, serde_json::Value> = Map::new();
    for k in KEYS {
        let s = key_schema(k);
        flat.insert(k.name.to_owned(), s.clone());
        let (section, leaf) = k.name.split_once('.').unwrap_or(("", k.name));
        let entry = sections.entry(section.to_owned()).or_insert_with(
            || json!({"type": "object", "properties": {}, "additionalProperties": true}),
        );
        if let Some(props) = entry
            .get_mut("properties")
            .and_then(serde_json::Value::as_object_mut)
        {
            props.insert(leaf.to_owned(), s);
        }
    }
    let mut properties = sections;
    properties.extend(flat);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agentbox configuration",
        "description": "config.yaml (global and per-project) and the defaults: block of agentbox.yaml. Keys nested or dotted.",
        "type": "object",
        "properties": properties,
        "additionalProperties": true,
    })
}

fn key_schema(k: &Key) -> serde_json::Value {
    use serde_json::json;
    let mut s = match k.kind {
        Kind::Bool => json!({"type": "boolean"}),
        Kind::U64 => json!({"type": "integer", "minimum": 0}),
        Kind::F64 => json!({"type": "number"}),
        Kind::Enum(words) => json!({"type": "string", "enum": words}),
        Kind::Size => json!({
            "type": ["string", "integer"],
            "pattern": "^[0-9.]+ ?([KkMmGgTt]([Ii]?[Bb])?|[Bb])?$",
        }),
        Kind::String => json!({"type": "string"}),
        Kind::List => json!({"type": "array", "items": {"type": "string"}}),
        Kind::Map => json!({"type": "object", "additionalProperties": {"type": "string"}}),
    };
    s["description"] = k.description.into();
    // Who may set it: an untrusted project file only as `x-agentbox-trust` says.
    s["x-agentbox-trust"] = k.trust.name().into();
    if let Some(d) = k.default_value() {
        s["default"] = d.to_json();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_sorted_unique_and_well_formed() {
        let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            names, sorted,
            "KEYS must be sorted by name, without duplicates"
        );
        for k in KEYS {
            assert!(k.name.contains('.'), "{} has a section", k.name);
            assert!(!k.description.is_empty());
            if let Some(d) = k.default_value() {
                // Defaults pass their own key's parsing: what is written back reads back.
                assert_eq!(parse_json(k, &d.to_json()), Ok(d), "{}", k.name);
            }
        }
        for (old, new) in RENAMED_KEYS {
            assert!(key(old).is_none(), "{old} is renamed, not a key");
            assert!(key(new).is_some(), "{old} is renamed to a key that exists");
        }
    }

    #[test]
    fn values_are_typed() {
        let k = |n| key(n).expect("key");
        assert_eq!(parse_text(k("box.capture"), "no"), Ok(Value::Bool(false)));
        assert!(parse_text(k("box.capture"), "maybe").is_err());
        assert_eq!(parse_text(k("box.keep"), "5"), Ok(Value::U64(5)));
        assert!(parse_text(k("box.keep"), "abc").is_err());
        assert!(parse_text(k("box.keep"), "-1").is_err());
        assert_eq!(parse_text(k("box.cpus"), "1.5"), Ok(Value::F64(1.5)));
        assert!(
            parse_text(k("box.cpus"), "0").is_err(),
            "checked like --cpus"
        );
        assert!(parse_text(k("box.pids"), "0").is_err());
        assert!(parse_text(k("box.network"), "bridge").is_err());
        assert_eq!(
            parse_text(k("box.memory"), "512M"),
            Ok(Value::Size {
                text: "512M".into(),
                bytes: 512 << 20
            })
        );
        assert!(parse_text(k("box.memory"), "lots").is_err());
        assert!(parse_json(k("box.keep"), &serde_json::json!(1.5)).is_err());
        assert!(parse_json(k("box.env"), &serde_json::json!("A=1")).is_err());
        assert!(parse_json(k("box.env"), &serde_json::json!(["A=1", "nope"])).is_err());
        assert!(parse_json(k("box.env"), &serde_json::json!([{"A": 1}])).is_err());
    }

    #[test]
    fn list_arguments() {
        let env = key("box.env").expect("key");
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_args(env, &args(&["A=1", "B=2"])),
            Ok(Value::List(vec!["A=1".into(), "B=2".into()]))
        );
        assert_eq!(
            parse_args(env, &args(&["[A=1, \"B=x y\"]"])),
            Ok(Value::List(vec!["A=1".into(), "B=x y".into()]))
        );
        assert_eq!(
            parse_args(env, &args(&["[\"A=1\"]"])),
            Ok(Value::List(vec!["A=1".into()]))
        );
        assert_eq!(parse_args(env, &args(&["[]"])), Ok(Value::List(vec![])));
        assert!(parse_args(env, &args(&["[A=1"])).is_err());
        assert!(parse_args(env, &[]).is_err());
        let keep = key("box.keep").expect("key");
        assert!(parse_args(keep, &args(&["1", "2"])).is_err());
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("box.netwrk"), Some("box.network"));
        assert_eq!(suggest("box.withenv"), Some("git.withEnv"));
        assert_eq!(suggest("box.withEnv"), Some("git.withEnv"));
        assert_eq!(suggest("network"), Some("box.network"));
        assert_eq!(suggest("completely.unrelated.thing"), None);
        assert!(is_section("box") && is_section("git") && !is_section("bo"));
    }

    #[test]
    fn the_trust_table_names_every_key() {
        let table: String = include_str!("keys.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .filter(|l| l.starts_with("//! | `"))
            .collect();
        for k in KEYS {
            assert!(
                table.contains(&format!("`{}`", k.name)),
                "the module's trust table misses `{}`",
                k.name
            );
        }
    }

    #[test]
    fn schema_lists_every_key() {
        let s = schema();
        for k in KEYS {
            assert!(s["properties"].get(k.name).is_some(), "{}", k.name);
            let (section, leaf) = k.name.split_once('.').expect("dotted");
            assert!(s["properties"][section]["properties"].get(leaf).is_some());
        }
    }

    #[test]
    fn readme_documents_every_key() {
        let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let text = std::fs::read_to_string(readme).expect("read README.md");
        for k in KEYS {
            assert!(
                text.contains(&format!("`{}`", k.name)),
                "README.md's configuration table misses `{}`",
                k.name
            );
        }
        for (old, new) in RENAMED_KEYS {
            assert!(
                text.contains(&format!("`{old}`")) && text.contains(&format!("`{new}`")),
                "README.md lists the renamed key {old}"
            );
        }
    }
}
