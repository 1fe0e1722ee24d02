//! Configuration files: where each layer lives, reading one into typed values, and
//! changing one key of a file.
//!
//! File format (YAML): a mapping whose keys are written nested (`box: {network: none}`) or
//! dotted (`box.network: none`), or both for different keys. A key set to null (`memory:`
//! with nothing after it) counts as not set in that file. The workspace layer is the
//! top-level `defaults:` mapping of the project's `agentbox.yaml`; the rest of that file
//! belongs to other readers and is not looked at.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentbox_core::home::Home;
use serde_json::{Map, Value as J};

use super::error::{ConfigError, ConfigWarning, WarningKind};
use super::key::{Key, Value};
use super::keys;
use crate::project::PROJECT_FILE;

/// Where a value comes from, lowest precedence first (the order of the variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// The registry's default.
    Builtin,
    /// `<home>/config.yaml`.
    Global,
    /// `<home>/projects/<key>/config.yaml` (see [`Home::project_dir`]).
    Project,
    /// The `defaults:` block of `<project root>/agentbox.yaml` (edited by hand).
    Workspace,
    /// A command-line flag.
    Flag,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Builtin => "builtin",
            Layer::Global => "global",
            Layer::Project => "project",
            Layer::Workspace => "workspace",
            Layer::Flag => "flag",
        }
    }
}

/// The file of `layer`: `None` for the built-in and flag layers, and for the project and
/// workspace layers outside a project.
pub fn layer_path(home: &Home, project_root: Option<&Path>, layer: Layer) -> Option<PathBuf> {
    match layer {
        Layer::Global => Some(home.root().join("config.yaml")),
        Layer::Project => project_root.map(|r| home.project_dir(r).join("config.yaml")),
        Layer::Workspace => project_root.map(|r| r.join(PROJECT_FILE)),
        Layer::Builtin | Layer::Flag => None,
    }
}

/// The typed values one file sets, by key name.
pub type LayerValues = BTreeMap<&'static str, Value>;

/// How a file names itself in messages (`agentbox.yaml defaults:` for the workspace).
fn label(path: &Path, layer: Layer) -> String {
    if layer == Layer::Workspace {
        format!("{} (defaults:)", path.display())
    } else {
        path.display().to_string()
    }
}

/// Read `path` as `layer`: its values and the unknown keys in it. A missing file sets
/// nothing. Renamed keys, values of the wrong type and malformed YAML are errors.
pub fn read_layer(
    path: &Path,
    layer: Layer,
) -> Result<(LayerValues, Vec<ConfigWarning>), ConfigError> {
    match read_text(path)? {
        Some(text) => parse_layer(path, layer, &text),
        None => Ok(Default::default()),
    }
}

/// The text of the file at `path`; `None` when it does not exist.
pub(super) fn read_text(path: &Path) -> Result<Option<String>, ConfigError> {
    match fs_err::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// [`read_layer`] of the file at `path` whose content is `text`.
pub(super) fn parse_layer(
    path: &Path,
    layer: Layer,
    text: &str,
) -> Result<(LayerValues, Vec<ConfigWarning>), ConfigError> {
    let Some(root) = parse_yaml(path, text)? else {
        return Ok(Default::default());
    };
    let map = if layer == Layer::Workspace {
        match root {
            J::Object(mut m) => match m.remove("defaults") {
                None | Some(J::Null) => return Ok(Default::default()),
                Some(J::Object(d)) => d,
                Some(other) => return Err(not_a_mapping(path, "defaults:", &other)),
            },
            other => return Err(not_a_mapping(path, "the file", &other)),
        }
    } else {
        match root {
            J::Object(m) => m,
            other => return Err(not_a_mapping(path, "the file", &other)),
        }
    };
    let mut found = Vec::new();
    let mut warnings = Vec::new();
    flatten(path, layer, "", &map, &mut found, &mut warnings)?;
    let mut values = LayerValues::new();
    for (key, raw) in found {
        let v = keys::parse_json(key, raw).map_err(|reason| ConfigError::InvalidValue {
            path: Some(path.to_owned()),
            key: key.name.to_owned(),
            value: raw.to_string(),
            reason,
        })?;
        if values.insert(key.name, v).is_some() {
            return Err(ConfigError::Duplicate {
                path: path.to_owned(),
                key: key.name.to_owned(),
            });
        }
    }
    Ok((values, warnings))
}

/// Collect the registered keys of `map` (under `prefix`), nested or dotted.
fn flatten<'a>(
    path: &Path,
    layer: Layer,
    prefix: &str,
    map: &'a Map<String, J>,
    found: &mut Vec<(&'static Key, &'a J)>,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(), ConfigError> {
    for (k, v) in map {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let Some(new) = keys::renamed(&name) {
            return Err(ConfigError::Renamed {
                path: Some(path.to_owned()),
                old: name,
                new,
            });
        }
        match (keys::key(&name), v) {
            (Some(_), J::Null) => {}
            (Some(key), v) => found.push((key, v)),
            (None, J::Object(inner)) => flatten(path, layer, &name, inner, found, warnings)?,
            // `box:` with nothing after it sets nothing, as a key set to null.
            (None, J::Null) if keys::is_section(&name) => {}
            // `box: none` is a value of the wrong type, not an unknown key: an error, so
            // that a setting meant to apply (perhaps a stricter one) never silently does not.
            (None, other) if keys::is_section(&name) => {
                return Err(ConfigError::NotASection {
                    path: path.to_owned(),
                    section: name,
                    found: describe(other).to_owned(),
                })
            }
            (None, _) => warnings.push(ConfigWarning {
                file: label(path, layer),
                kind: WarningKind::Unknown {
                    suggestion: keys::suggest(&name),
                },
                key: name,
            }),
        }
    }
    Ok(())
}

fn not_a_mapping(path: &Path, what: &str, found: &J) -> ConfigError {
    ConfigError::NotAMapping {
        path: path.to_owned(),
        what: what.to_owned(),
        found: describe(found).to_owned(),
    }
}

/// What kind of YAML value `v` is, for messages.
fn describe(v: &J) -> &'static str {
    match v {
        J::Null => "nothing",
        J::Bool(_) => "a boolean",
        J::Number(_) => "a number",
        J::String(_) => "text",
        J::Array(_) => "a list",
        J::Object(_) => "a mapping",
    }
}

/// The YAML document of `path`; `None` when the file does not exist or holds no document.
fn read_yaml(path: &Path) -> Result<Option<J>, ConfigError> {
    match read_text(path)? {
        Some(text) => parse_yaml(path, &text),
        None => Ok(None),
    }
}

/// The YAML document `text` of the file at `path`; `None` when it holds none.
fn parse_yaml(path: &Path, text: &str) -> Result<Option<J>, ConfigError> {
    let doc: Option<J> = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        line: e.location().map(|l| l.line()),
        message: strip_location(&keys::first_line(&e.to_string()))
            // Advice about the parser's options is not for the file's author.
            .replace(", set DuplicateKeyPolicy in Options if acceptable", ""),
    })?;
    Ok(doc.filter(|d| !d.is_null()))
}

/// `line 1 column 4: unclosed bracket` → `unclosed bracket` (the line is reported apart).
fn strip_location(msg: &str) -> String {
    match msg.split_once(": ") {
        Some((loc, rest)) if loc.starts_with("line ") => rest.to_owned(),
        _ => msg.to_owned(),
    }
}

/// The mapping a writable file holds (empty when the file is missing or empty).
fn read_for_write(path: &Path) -> Result<Map<String, J>, ConfigError> {
    match read_yaml(path)? {
        None => Ok(Map::new()),
        Some(J::Object(m)) => Ok(m),
        Some(other) => Err(not_a_mapping(path, "the file", &other)),
    }
}

fn write_map(path: &Path, map: &Map<String, J>) -> Result<(), ConfigError> {
    let write_err = |source| ConfigError::Write {
        path: path.to_owned(),
        source,
    };
    let text = if map.is_empty() {
        String::new()
    } else {
        serde_saphyr::to_string(map).map_err(|e| ConfigError::Write {
            path: path.to_owned(),
            source: agentbox_core::Error::Io(std::io::Error::other(e.to_string())),
        })?
    };
    if let Some(dir) = path.parent() {
        fs_err::create_dir_all(dir).map_err(|e| write_err(e.into()))?;
    }
    agentbox_core::atomic::write_atomic(path, text.as_bytes()).map_err(write_err)
}

/// Every spelling `name` can have in a file: itself and the names it was renamed from.
fn spellings(name: &str) -> Vec<&str> {
    let mut out = vec![name];
    out.extend(
        keys::RENAMED_KEYS
            .iter()
            .filter(|(_, new)| *new == name)
            .map(|(old, _)| *old),
    );
    out
}

/// Remove `name` from `map`, nested or dotted at any split; true when something was removed.
/// Sections left empty by the removal go too.
fn remove(map: &mut Map<String, J>, name: &str) -> bool {
    let mut removed = map.remove(name).is_some();
    let mut at = 0;
    while let Some(i) = name[at..].find('.') {
        let (head, rest) = (&name[..at + i], &name[at + i + 1..]);
        if let Some(J::Object(inner)) = map.get_mut(head) {
            if remove(inner, rest) {
                removed = true;
                if inner.is_empty() {
                    map.remove(head);
                }
            }
        }
        at += i + 1;
    }
    removed
}

/// Set `name` in the mapping nested by its dots.
fn insert(path: &Path, map: &mut Map<String, J>, name: &str, value: J) -> Result<(), ConfigError> {
    match name.split_once('.') {
        None => {
            map.insert(name.to_owned(), value);
            Ok(())
        }
        Some((head, rest)) => {
            let entry = map
                .entry(head.to_owned())
                .or_insert_with(|| J::Object(Map::new()));
            if entry.is_null() {
                *entry = J::Object(Map::new());
            }
            match entry {
                J::Object(inner) => insert(path, inner, rest, value),
                other => Err(not_a_mapping(path, &format!("section {head}"), other)),
            }
        }
    }
}

/// Set key `name` to `value` in the file at `path` (created if missing), atomically,
/// keeping every other key. The key is written nested; a dotted spelling of it, or an old
/// name it was renamed from, is removed. Comments and key order are not kept.
pub fn set_in(path: &Path, name: &str, value: &Value) -> Result<(), ConfigError> {
    let mut map = read_for_write(path)?;
    for s in spellings(name) {
        remove(&mut map, s);
    }
    insert(path, &mut map, name, value.to_json())?;
    write_map(path, &map)
}

/// Remove key `name` (every spelling) from the file at `path`; false when it was not there
/// (the file is then left untouched).
pub fn unset_in(path: &Path, name: &str) -> Result<bool, ConfigError> {
    let mut map = read_for_write(path)?;
    let mut removed = false;
    for s in spellings(name) {
        removed |= remove(&mut map, s);
    }
    if removed {
        write_map(path, &map)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    #[test]
    fn nested_and_dotted_spellings() {
        let d = tmp();
        let p = d.path().join("config.yaml");
        std::fs::write(
            &p,
            "box:\n  network: none\n  memory: 512M\n  env: [A=1]\ngit.withEnv: yes\nbox.keep: 7\n",
        )
        .expect("write");
        let (v, w) = read_layer(&p, Layer::Global).expect("read");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(v["box.network"], Value::Str("none".into()));
        assert_eq!(v["box.keep"], Value::U64(7));
        assert_eq!(v["git.withEnv"], Value::Bool(true));
        assert_eq!(v["box.env"], Value::List(vec!["A=1".into()]));
        assert_eq!(v.len(), 5);
    }

    #[test]
    fn unknown_keys_warn_renamed_keys_fail() {
        let d = tmp();
        let p = d.path().join("config.yaml");
        std::fs::write(&p, "box:\n  netwrk: none\n  capture: false\nfuture: 1\n").expect("write");
        let (v, w) = read_layer(&p, Layer::Global).expect("read");
        assert_eq!(v["box.capture"], Value::Bool(false));
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].key, "box.netwrk");
        assert_eq!(
            w[0].kind,
            WarningKind::Unknown {
                suggestion: Some("box.network")
            }
        );
        assert!(w[0].to_string().contains(&p.display().to_string()));

        std::fs::write(&p, "box:\n  withEnv: true\n").expect("write");
        let e = read_layer(&p, Layer::Global).expect_err("renamed");
        assert!(
            matches!(&e, ConfigError::Renamed { old, new: "git.withEnv", .. } if old == "box.withEnv")
        );
        let msg = e.to_string();
        assert!(msg.contains("box.withEnv") && msg.contains("git.withEnv"));
        assert!(msg.contains(&p.display().to_string()), "{msg}");
        assert_eq!(e.exit_code(), 9);
    }

    #[test]
    fn bad_files_name_path_key_and_line() {
        let d = tmp();
        let p = d.path().join("config.yaml");
        std::fs::write(&p, "box:\n  keep: abc\n").expect("write");
        let e = read_layer(&p, Layer::Global).expect_err("type");
        assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "box.keep"));
        std::fs::write(&p, "box:\n  keep: [\n").expect("write");
        let e = read_layer(&p, Layer::Global).expect_err("yaml");
        assert!(matches!(e, ConfigError::Parse { line: Some(_), .. }), "{e}");
        std::fs::write(&p, "- a\n").expect("write");
        assert!(matches!(
            read_layer(&p, Layer::Global),
            Err(ConfigError::NotAMapping { .. })
        ));
        std::fs::write(&p, "box:\n  keep: 1\nbox.keep: 2\n").expect("write");
        assert!(matches!(
            read_layer(&p, Layer::Global),
            Err(ConfigError::Duplicate { .. })
        ));
        // A section given a value is the wrong type, not an unknown key.
        for text in ["box: none\n", "box: 5\n", "git: [a]\n"] {
            std::fs::write(&p, text).expect("write");
            let e = read_layer(&p, Layer::Global).expect_err(text);
            assert!(matches!(&e, ConfigError::NotASection { .. }), "{text}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(&p.display().to_string()), "{msg}");
            assert!(msg.contains("mapping"), "{msg}");
            assert_eq!(e.exit_code(), 9);
            assert!(e.hint().is_some_and(|h| h.contains("schema")));
        }
        std::fs::write(&p, "box:\n").expect("write");
        assert!(read_layer(&p, Layer::Global)
            .expect("empty section")
            .0
            .is_empty());
        std::fs::write(&p, "# nothing yet\n").expect("write");
        assert!(read_layer(&p, Layer::Global).expect("empty").0.is_empty());
        assert!(read_layer(&d.path().join("missing"), Layer::Global)
            .expect("missing")
            .0
            .is_empty());
    }

    #[test]
    fn workspace_reads_only_defaults() {
        let d = tmp();
        let p = d.path().join("agentbox.yaml");
        std::fs::write(
            &p,
            "services:\n  web: {cmd: npm start}\nbox.keep: 3\ndefaults:\n  box:\n    keep: 9\n",
        )
        .expect("write");
        let (v, w) = read_layer(&p, Layer::Workspace).expect("read");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(v["box.keep"], Value::U64(9));
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn set_and_unset_keep_other_keys() {
        let d = tmp();
        let p = d.path().join("sub/config.yaml");
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(
            &p,
            "future: {x: 1}\nbox.network: none\nbox:\n  withEnv: true\n",
        )
        .expect("write");
        let keep = Value::U64(5);
        // Setting the new name replaces the dotted spelling and the old name.
        set_in(&p, "git.withEnv", &Value::Bool(false)).expect("set");
        set_in(&p, "box.network", &Value::Str("host".into())).expect("set");
        set_in(&p, "box.keep", &keep).expect("set");
        let (v, w) = read_layer(&p, Layer::Global).expect("read");
        assert_eq!(v["box.keep"], keep);
        assert_eq!(v["box.network"], Value::Str("host".into()));
        assert_eq!(v["git.withEnv"], Value::Bool(false));
        assert_eq!(w.len(), 1, "the unknown key stays: {w:?}");
        assert!(unset_in(&p, "box.keep").expect("unset"));
        assert!(!unset_in(&p, "box.keep").expect("unset again"));
        let text = std::fs::read_to_string(&p).expect("read");
        assert!(!text.contains("keep"), "{text}");
        assert!(text.contains("future"), "{text}");
    }
}
