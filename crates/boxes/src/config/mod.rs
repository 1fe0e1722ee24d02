//! Layered configuration.
//!
//! A key's effective value comes from the highest layer that sets it:
//! command-line flag > workspace (`defaults:` in the project's `agentbox.yaml`) > project
//! (`<home>/projects/<key>/config.yaml`) > global (`<home>/config.yaml`) > built-in.
//! A layer replaces a lower layer's value whole, lists included.
//!
//! It owns the configuration files and what their values mean; it must not make, start or
//! look up boxes (it reads no record and no store): the code that creates boxes reads
//! [`Effective`]. Below it are only the host view (whose entry syntax it checks), projects
//! and sessions.
//!
//! * [`key`]: what a key is (its kind, value, check and trust class).
//! * [`keys`]: the registry of keys, their types, defaults and descriptions, the renamed
//!   keys, value parsing and the JSON schema.
//! * [`layers`]: the files, reading them, and setting or removing one key in one.
//! * [`Config`]: every key's effective value with its origin; [`Effective`]: the same as a
//!   typed struct for the code that creates boxes.
//!
//! Unknown keys in a file are warnings (a newer version may know them); renamed keys, bad
//! values (of the wrong type, or a section given a value) and malformed files are errors
//! naming the file and key — in an untrusted project file too, so that a setting meant to
//! make a box stricter never silently does not apply.
//!
//! The workspace layer is the project's checked-in file: unless the user trusted that exact
//! file ([`trusted`]), it may only make a box stricter than the user's layers do
//! ([`trust`], the table in [`keys`]); what it may not set is ignored with a warning.

mod checks;
mod effective;
mod error;
pub mod key;
pub mod keys;
pub mod layers;
pub mod trust;
pub mod trusted;

pub use effective::Effective;

use std::path::{Path, PathBuf};

use agentbox_core::home::Home;
use agentbox_sandbox::proto::Network;

pub use error::{ConfigError, ConfigWarning, Ignored, WarningKind};
pub use key::{Key, Kind, Value};
pub use keys::{KEYS, RENAMED_KEYS};
pub use layers::{layer_path, set_in, unset_in, Layer};

/// Where an effective value comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Origin {
    pub layer: Layer,
    /// The file, for the file layers.
    pub file: Option<PathBuf>,
}

/// One key's effective value.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: &'static Key,
    /// `None` when no layer sets the key and it has no built-in default.
    pub value: Option<Value>,
    pub origin: Origin,
}

/// The effective configuration: one [`Entry`] per registry key, in registry order.
#[derive(Debug, Clone)]
pub struct Config {
    entries: Vec<Entry>,
    warnings: Vec<ConfigWarning>,
    ignored: Vec<Ignored>,
}

impl Config {
    /// Only the built-in defaults.
    pub fn builtin() -> Config {
        Config {
            entries: KEYS
                .iter()
                .map(|key| Entry {
                    key,
                    value: key.default_value(),
                    origin: Origin {
                        layer: Layer::Builtin,
                        file: None,
                    },
                })
                .collect(),
            warnings: Vec::new(),
            ignored: Vec::new(),
        }
    }

    /// Load the global layer of `home` and, with a project root (canonical, as
    /// [`crate::project::find_root`] gives it), the project and workspace layers. Missing
    /// files set nothing. The workspace file applies whole only when the user trusted its
    /// exact content; otherwise only what makes the box stricter (see [`trust`]).
    pub fn load(home: &Home, project_root: Option<&Path>) -> Result<Config, ConfigError> {
        let mut config = Config::user_layers(home, project_root)?;
        if let Some(path) = layer_path(home, project_root, Layer::Workspace) {
            config.apply_workspace(home, &path)?;
        }
        Ok(config)
    }

    /// The built-in, global and (with a project root) project layers: the user's own.
    pub(crate) fn user_layers(
        home: &Home,
        project_root: Option<&Path>,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::builtin();
        for layer in [Layer::Global, Layer::Project] {
            if let Some(path) = layer_path(home, project_root, layer) {
                let (values, warnings) = layers::read_layer(&path, layer)?;
                config.warnings.extend(warnings);
                config.apply_values(&path, layer, values)?;
            }
        }
        Ok(config)
    }

    /// Lay `values` (of the file at `path`) over the current ones, as `layer`.
    fn apply_values(
        &mut self,
        path: &Path,
        layer: Layer,
        values: layers::LayerValues,
    ) -> Result<(), ConfigError> {
        for (name, value) in values {
            self.put(
                name,
                value,
                Origin {
                    layer,
                    file: Some(path.to_owned()),
                },
            )?;
        }
        Ok(())
    }

    /// Lay the project's workspace file at `path` over the user's layers: whole when the
    /// user trusted its content, else only what [`trust::untrusted`] lets through.
    fn apply_workspace(&mut self, home: &Home, path: &Path) -> Result<(), ConfigError> {
        // Read once: what is checked against the trusted hash is what applies.
        let Some(text) = layers::read_text(path)? else {
            return Ok(());
        };
        let (values, warnings) = layers::parse_layer(path, Layer::Workspace, &text)?;
        self.warnings.extend(warnings);
        if values.is_empty() {
            return Ok(());
        }
        let changed = match trusted::check(home, path, text.as_bytes())? {
            trusted::FileTrust::Trusted => {
                return self.apply_values(path, Layer::Workspace, values)
            }
            trusted::FileTrust::Untrusted => false,
            trusted::FileTrust::Changed { .. } => true,
        };
        let origin = Origin {
            layer: Layer::Workspace,
            file: Some(path.to_owned()),
        };
        for (name, given) in values {
            let key = lookup(name)?;
            let user = self.value(name).cloned();
            let (applied, ignored) = match trust::untrusted(key, user.as_ref(), given.clone()) {
                trust::Outcome::Apply(v) => (Some(v), None),
                trust::Outcome::Partly {
                    applied,
                    ignored,
                    why,
                } => (Some(applied), Some((ignored, why))),
                trust::Outcome::Ignored(why) => (None, Some((given, why))),
            };
            if let Some(v) = applied {
                self.put(name, v, origin.clone())?;
            }
            if let Some((value, why)) = ignored {
                let ignored = Ignored {
                    key: key.name,
                    value,
                    path: path.to_owned(),
                    why,
                    changed,
                };
                self.warnings.push(ConfigWarning {
                    file: format!("{} (defaults:)", path.display()),
                    key: key.name.to_owned(),
                    kind: WarningKind::Untrusted(ignored.clone()),
                });
                self.ignored.push(ignored);
            }
        }
        Ok(())
    }

    /// Set `name` from a command-line flag: it wins over every file.
    pub fn apply_flag(&mut self, name: &str, value: Value) -> Result<(), ConfigError> {
        self.put(
            name,
            value,
            Origin {
                layer: Layer::Flag,
                file: None,
            },
        )
    }

    /// Parse `text` as a command-line value of `name` and apply it as a flag.
    pub fn apply_flag_text(&mut self, name: &str, text: &str) -> Result<(), ConfigError> {
        let key = lookup(name)?;
        let value = keys::parse_text(key, text).map_err(|reason| ConfigError::InvalidValue {
            path: None,
            key: name.to_owned(),
            value: format!("{text:?}"),
            reason,
        })?;
        self.apply_flag(name, value)
    }

    fn put(&mut self, name: &str, value: Value, origin: Origin) -> Result<(), ConfigError> {
        let key = lookup(name)?;
        let entry = self
            .entries
            .iter_mut()
            .find(|e| e.key.name == key.name)
            .expect("every registry key has an entry");
        entry.value = Some(value);
        entry.origin = origin;
        Ok(())
    }

    /// Every key, in registry order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of `name`; an unknown or renamed name is an error.
    pub fn entry(&self, name: &str) -> Result<&Entry, ConfigError> {
        let key = lookup(name)?;
        Ok(self
            .entries
            .iter()
            .find(|e| e.key.name == key.name)
            .expect("every registry key has an entry"))
    }

    /// The effective value of a registry key (`None` when unset or unknown).
    pub fn value(&self, name: &str) -> Option<&Value> {
        self.entry(name).ok().and_then(|e| e.value.as_ref())
    }

    /// Unknown keys met while loading, and the values of an untrusted project file that
    /// were ignored.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The values of an untrusted project file that were ignored (also in [`Self::warnings`]).
    pub fn ignored(&self) -> &[Ignored] {
        &self.ignored
    }

    /// The typed view of the keys the product reads.
    pub fn effective(&self) -> Effective {
        Effective {
            network: match self.text("box.network") {
                Some("none") => Network::None,
                Some("private") => Network::Private,
                _ => Network::Host,
            },
            capture: self.flag("box.capture"),
            broker: self.flag("box.broker"),
            anthropic_upstream: self
                .text("broker.anthropicUpstream")
                .unwrap_or(agentbox_broker::endpoint::DEFAULT_ANTHROPIC_UPSTREAM)
                .to_owned(),
            openai_upstream: self
                .text("broker.openaiUpstream")
                .unwrap_or(agentbox_broker::endpoint::DEFAULT_OPENAI_UPSTREAM)
                .to_owned(),
            keep: match self.value("box.keep") {
                Some(Value::U64(n)) => *n,
                _ => crate::config::keys::DEFAULT_KEEP,
            },
            memory_bytes: match self.value("box.memory") {
                Some(Value::Size { bytes, .. }) => Some(*bytes),
                _ => None,
            },
            pids: match self.value("box.pids") {
                Some(Value::U64(n)) => Some(*n),
                _ => None,
            },
            cpus: match self.value("box.cpus") {
                Some(Value::F64(f)) => Some(*f),
                _ => None,
            },
            env: self.list("box.env"),
            ignore: self.list("box.ignore"),
            host_paths: self.list("box.hostPaths"),
            home_tools: self.list("box.homeTools"),
            image: self.text("box.image").map(str::to_owned),
            provider: self.text("box.provider").map(str::to_owned),
            docker_hosts: match self.value("docker.hosts") {
                Some(Value::Map(m)) => m.clone(),
                _ => Default::default(),
            },
            agents_broker: self.flag("agents.broker"),
            agents_skip_permissions: self.flag("agents.skipPermissions"),
            isolate_config: ["claude", "codex", "opencode"]
                .into_iter()
                .filter(|a| self.flag(&format!("{a}.isolateConfig")))
                .map(str::to_owned)
                .collect(),
            default_checkpoint: self.text("box.defaultCheckpoint").map(str::to_owned),
            resync_on_start: self.flag("box.resyncOnStart"),
            checkpoint_cleanup: self.list("checkpoint.cleanup"),
            checkpoint_cleanup_command: self.text("checkpoint.cleanupCommand").map(str::to_owned),
            checkpoint_max_layers: match self.value("checkpoint.maxLayers") {
                Some(Value::U64(n)) => *n,
                _ => 3,
            },
            carry: self.flag("git.carry"),
            with_env: self.flag("git.withEnv"),
            env_patterns: self.list("git.envPatterns"),
            remote: self.text("git.remote").unwrap_or("origin").to_owned(),
            detach_key: self
                .text("session.detachKey")
                .and_then(|k| crate::sessions::DetachKey::parse(k).ok())
                .unwrap_or_default(),
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.value(name), Some(Value::Bool(true)))
    }

    fn text(&self, name: &str) -> Option<&str> {
        match self.value(name) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    fn list(&self, name: &str) -> Vec<String> {
        match self.value(name) {
            Some(Value::List(items)) => items.clone(),
            _ => Vec::new(),
        }
    }
}

/// The registry entry of `name`, or why there is none.
pub fn lookup(name: &str) -> Result<&'static Key, ConfigError> {
    if let Some(new) = keys::renamed(name) {
        return Err(ConfigError::Renamed {
            path: None,
            old: name.to_owned(),
            new,
        });
    }
    keys::key(name)
        .or_else(|| keys::member(name).map(|(k, _)| k))
        .ok_or_else(|| ConfigError::UnknownKey {
            key: name.to_owned(),
            suggestion: keys::suggest(name),
        })
}

/// The name under which `name` is written in a file: a key's own name (`box.network`,
/// whatever spelling found it), or a map key's member as given (`docker.hosts.big`).
pub fn written_name(name: &str) -> Result<String, ConfigError> {
    if let Some((k, m)) = keys::member(name) {
        return Ok(format!("{}.{m}", k.name));
    }
    lookup(name).map(|k| k.name.to_owned())
}

/// Parse the values of `config set NAME VALUE...` (see [`keys::parse_args`]).
pub fn parse_set_args(name: &str, args: &[String]) -> Result<Value, ConfigError> {
    if let Some((key, member)) = keys::member(name) {
        // One member of a map key: its value alone, checked as the map would be.
        let invalid = |reason: String| ConfigError::InvalidValue {
            path: None,
            key: name.to_owned(),
            value: format!("{:?}", args.join(" ")),
            reason,
        };
        let [one] = args else {
            return Err(invalid(format!("{name} takes one value")));
        };
        let map = Value::Map([(member.to_owned(), one.clone())].into());
        if let Some(check) = key.check {
            check(&map).map_err(invalid)?;
        }
        return Ok(Value::Str(one.clone()));
    }
    let key = lookup(name)?;
    keys::parse_args(key, args).map_err(|reason| ConfigError::InvalidValue {
        path: None,
        key: name.to_owned(),
        value: format!("{:?}", args.join(" ")),
        reason,
    })
}

/// Check the file of `layer` at `path` as loading would: its unknown keys, or its first
/// error.
pub fn check_file(path: &Path, layer: Layer) -> Result<Vec<ConfigWarning>, ConfigError> {
    layers::read_layer(path, layer).map(|(_, w)| w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_effective() {
        let e = Config::builtin().effective();
        assert_eq!(e.network, Network::Host);
        assert!(e.capture && e.carry && !e.with_env);
        assert_eq!(e.keep, crate::config::keys::DEFAULT_KEEP);
        assert_eq!(e.env_patterns, agentbox_git::default_env_patterns());
        assert_eq!(e.remote, "origin");
        assert_eq!((e.memory_bytes, e.pids, e.cpus), (None, None, None));
        assert!(e.image.is_none() && e.env.is_empty() && e.ignore.is_empty());
    }

    #[test]
    fn layers_take_precedence_in_order() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = Home::at(t.path().join("home"));
        let root = t.path().join("proj");
        let w = |layer, text: &str| {
            let p = layer_path(&home, Some(&root), layer).expect("path");
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        };
        w(
            Layer::Global,
            "box: {keep: 1, pids: 1, cpus: 1, memory: 1G}\n",
        );
        // The workspace file is untrusted: its pids apply because they are lower.
        w(Layer::Project, "box: {keep: 2, pids: 5, cpus: 2}\n");
        w(
            Layer::Workspace,
            "name: x\ndefaults:\n  box.keep: 3\n  box.pids: 3\n",
        );
        let mut c = Config::load(&home, Some(&root)).expect("load");
        c.apply_flag_text("box.keep", "4").expect("flag");
        let at = |name| {
            let e = c.entry(name).expect("entry");
            (e.value.clone(), e.origin.layer)
        };
        assert_eq!(at("box.keep"), (Some(Value::U64(4)), Layer::Flag));
        assert_eq!(at("box.pids"), (Some(Value::U64(3)), Layer::Workspace));
        assert_eq!(at("box.cpus"), (Some(Value::F64(2.0)), Layer::Project));
        assert_eq!(at("box.memory").1, Layer::Global);
        assert_eq!(
            at("box.network"),
            (Some(Value::Str("host".into())), Layer::Builtin)
        );
        assert_eq!(
            c.entry("box.pids").expect("entry").origin.file,
            layer_path(&home, Some(&root), Layer::Workspace)
        );
        let e = c.effective();
        assert_eq!(
            (e.keep, e.pids, e.cpus, e.memory_bytes),
            (4, Some(3), Some(2.0), Some(1 << 30))
        );
        // Without the project, only the global layer counts.
        let g = Config::load(&home, None).expect("load").effective();
        assert_eq!((g.keep, g.pids), (1, Some(1)));
    }

    #[test]
    fn names_are_checked() {
        let c = Config::builtin();
        assert!(matches!(
            c.entry("box.netwrk"),
            Err(ConfigError::UnknownKey {
                suggestion: Some("box.network"),
                ..
            })
        ));
        let e = c.entry("box.envPatterns").expect_err("renamed");
        assert!(e.to_string().contains("git.envPatterns"));
        assert!(parse_set_args("box.keep", &["abc".into()]).is_err());
    }

    #[test]
    fn an_untrusted_project_file_only_makes_a_box_stricter() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = Home::at(t.path().join("home"));
        let root = t.path().join("proj");
        std::fs::create_dir_all(&root).expect("mkdir");
        let global = layer_path(&home, None, Layer::Global).expect("path");
        std::fs::create_dir_all(home.root()).expect("mkdir");
        std::fs::write(&global, "box: {hostPaths: [/srv/mine], pids: 100}\n").expect("write");
        let file = root.join(crate::project::PROJECT_FILE);
        let text = "defaults:\n  broker.anthropicUpstream: http://127.0.0.1:9\n  agents.broker: false\n  box:\n    hostPaths: [/home, '!/opt/x']\n    homeTools: [.config]\n    network: none\n    pids: 50\n    keep: 7\n";
        std::fs::write(&file, text).expect("write");
        let c = Config::load(&home, Some(&root)).expect("load");
        let e = c.effective();
        assert_eq!(
            e.anthropic_upstream,
            agentbox_broker::endpoint::DEFAULT_ANTHROPIC_UPSTREAM
        );
        assert!(e.agents_broker);
        assert_eq!(e.host_paths, ["/srv/mine", "!/opt/x"]);
        assert!(e.home_tools.is_empty());
        assert_eq!((e.network, e.pids, e.keep), (Network::None, Some(50), 7));
        let ignored: Vec<&str> = c.ignored().iter().map(|i| i.key).collect();
        assert_eq!(
            ignored,
            [
                "agents.broker",
                "box.homeTools",
                "box.hostPaths",
                "broker.anthropicUpstream"
            ]
        );
        let lines: Vec<String> = c.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 4, "{lines:?}");
        for l in &lines {
            assert!(
                l.contains(&file.display().to_string())
                    && l.contains("agentbox trust")
                    && l.contains("not trusted"),
                "{l}"
            );
        }
        assert!(lines[2].contains("[\"/home\"]"), "{}", lines[2]);

        // Trusted, it applies whole; changed, it is untrusted again, and says so.
        trusted::trust(&home, &file, text.as_bytes()).expect("trust");
        let c = Config::load(&home, Some(&root)).expect("load");
        let e = c.effective();
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        assert_eq!(e.anthropic_upstream, "http://127.0.0.1:9");
        assert!(!e.agents_broker);
        assert_eq!(e.host_paths, ["/home", "!/opt/x"]);
        std::fs::write(&file, format!("{text}  box.capture: false\n")).expect("write");
        let c = Config::load(&home, Some(&root)).expect("load");
        assert!(c.effective().agents_broker);
        assert!(c.warnings()[0]
            .to_string()
            .contains("changed since you trusted it"));
        assert!(
            !c.effective().capture,
            "what any file may set still applies"
        );
    }
}
