//! `agentbox config`: get, set, unset, list, edit, path, schema, list-projects.
//!
//! The project of a command is the one its current directory is in (for `create`: its
//! `--from` directory); see `agentbox_boxes::project::find_root`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentbox_boxes::config::{
    self, layer_path, Config, ConfigError, ConfigWarning, Entry, Kind, Layer, Value,
};
use agentbox_boxes::project::find_root;
use serde::Serialize;
use serde_json::json;

use super::ctx::Ctx;
use crate::args::{ConfigCmd, ConfigFlags, ConfigTarget};
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn run(ctx: &Ctx, cmd: ConfigCmd) -> CliResult {
    let cwd = agentbox_boxes::records::registry::current_dir()?;
    let root = find_root(&cwd);
    let root = root.as_deref();
    match cmd {
        ConfigCmd::Get {
            key,
            show_origin,
            flags,
        } => get(ctx, root, &key, show_origin, &flags),
        ConfigCmd::List { show_origin, flags } => list(ctx, root, show_origin, &flags),
        ConfigCmd::Set {
            key,
            values,
            target,
        } => set(ctx, &cwd, root, &key, &values, &target),
        ConfigCmd::Unset { key, target } => unset(ctx, &cwd, root, &key, &target),
        ConfigCmd::Edit { target } => edit(ctx, &cwd, root, &target),
        ConfigCmd::Path { target } => path(ctx, &cwd, root, &target),
        ConfigCmd::ListProjects => list_projects(ctx),
        ConfigCmd::Schema => {
            let schema = config::keys::schema();
            let text = serde_json::to_string_pretty(&schema).map_err(|e| {
                CliError::new(
                    crate::errors::ExitCode::Failure,
                    format!("cannot encode the schema: {e}"),
                    None,
                )
            })?;
            println!("{text}");
            Ok(())
        }
    }
}

/// Unknown keys are worth a line on stderr whatever the output format: they may be typos.
fn warn(warnings: &[ConfigWarning]) {
    for w in warnings {
        eprintln!("agentbox: warning: {w}");
    }
}

/// The effective configuration of the project at `root` (or only the global one), with
/// the `--flag KEY=VALUE` values on top. Prints the unknown keys met.
fn load(ctx: &Ctx, root: Option<&Path>, flags: &ConfigFlags) -> CliResult<Config> {
    let mut config = Config::load(&ctx.home, root)?;
    warn(config.warnings());
    // A list key collects its --flag values; any other key takes its last one.
    let mut by_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for f in &flags.flags {
        let (k, v) = f.split_once('=').ok_or_else(|| {
            CliError::usage(
                format!("--flag {f:?} is not KEY=VALUE"),
                "for example --flag box.network=none",
            )
        })?;
        let key = config::lookup(k)?;
        let values = by_key.entry(key.name).or_default();
        if key.kind != Kind::List {
            values.clear();
        }
        values.push(v.to_owned());
    }
    for (k, values) in by_key {
        config.apply_flag(k, config::parse_set_args(k, &values)?)?;
    }
    Ok(config)
}

#[derive(Serialize)]
struct EntryOut {
    key: &'static str,
    value: Option<serde_json::Value>,
    origin: Layer,
    file: Option<PathBuf>,
    #[serde(rename = "type")]
    kind: String,
    default: Option<serde_json::Value>,
    description: &'static str,
    /// Which layers may set it: `any`, `stricter` (an untrusted project file only towards
    /// stricter) or `user` (not an untrusted project file).
    trust: &'static str,
    /// What an untrusted project file sets for it that does not apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    ignored: Option<IgnoredOut>,
}

#[derive(Serialize)]
struct IgnoredOut {
    value: serde_json::Value,
    file: PathBuf,
    why: config::trust::Refused,
    /// The file was trusted once, with another content.
    changed: bool,
}

impl EntryOut {
    fn new(e: &Entry, config: &Config) -> EntryOut {
        EntryOut {
            key: e.key.name,
            value: e.value.as_ref().map(Value::to_json),
            origin: e.origin.layer,
            file: e.origin.file.clone(),
            kind: e.key.kind.describe(),
            default: e.key.default_value().map(|v| v.to_json()),
            description: e.key.description,
            trust: e.key.trust.name(),
            ignored: config
                .ignored()
                .iter()
                .find(|i| i.key == e.key.name)
                .map(|i| IgnoredOut {
                    value: i.value.to_json(),
                    file: i.path.clone(),
                    why: i.why,
                    changed: i.changed,
                }),
        }
    }
}

/// A value for people; a project's file is untrusted text, so it is escaped.
fn shown(v: Option<&Value>) -> String {
    v.map(|v| render::text(&v.display()).into_owned())
        .unwrap_or_else(|| "(unset)".into())
}

/// A line per value of an untrusted project file that does not apply.
fn ignored_lines(config: &Config) -> String {
    config
        .ignored()
        .iter()
        .map(|i| {
            format!(
                "ignored: {} = {} from {} ({}; `agentbox trust` applies it)\n",
                i.key,
                shown(Some(&i.value)),
                render::path(&i.path),
                if i.changed {
                    "changed since trusted"
                } else {
                    "untrusted"
                }
            )
        })
        .collect()
}

/// `project /path/to/config.yaml`, `builtin`.
fn origin_text(e: &Entry) -> String {
    match &e.origin.file {
        Some(f) => format!("{} {}", e.origin.layer.name(), f.display()),
        None => e.origin.layer.name().to_owned(),
    }
}

fn get(
    ctx: &Ctx,
    root: Option<&Path>,
    key: &str,
    show_origin: bool,
    flags: &ConfigFlags,
) -> CliResult {
    let config = load(ctx, root, flags)?;
    let e = config.entry(key)?;
    if e.value.is_none() {
        ctx.note(format!("{} is not set", e.key.name));
    }
    ctx.out(&EntryOut::new(e, &config), || {
        match (&e.value, show_origin) {
            (None, false) => String::new(),
            (v, true) => format!("{}\t{}\n", origin_text(e), shown(v.as_ref())),
            // One item per line, so a shell loop can read a list.
            (Some(Value::List(items)), false) => items
                .iter()
                .map(|i| format!("{}\n", render::text(i)))
                .collect(),
            (Some(v), false) => format!("{}\n", v.display()),
        }
    })
}

fn list(ctx: &Ctx, root: Option<&Path>, show_origin: bool, flags: &ConfigFlags) -> CliResult {
    let config = load(ctx, root, flags)?;
    let out: Vec<EntryOut> = config
        .entries()
        .iter()
        .map(|e| EntryOut::new(e, &config))
        .collect();
    ctx.out(&out, || {
        let rows: Vec<Vec<String>> = config
            .entries()
            .iter()
            .map(|e| {
                let mut row = vec![e.key.name.to_owned(), shown(e.value.as_ref())];
                if show_origin {
                    row.push(e.key.trust.name().to_owned());
                    row.push(e.origin.layer.name().to_owned());
                    row.push(
                        e.origin
                            .file
                            .as_ref()
                            .map(|f| f.display().to_string())
                            .unwrap_or_default(),
                    );
                } else {
                    row.push(e.key.description.to_owned());
                }
                row
            })
            .collect();
        let header: &[&str] = if show_origin {
            &["KEY", "VALUE", "TRUST", "ORIGIN", "FILE"]
        } else {
            &["KEY", "VALUE", "DESCRIPTION"]
        };
        render::columns(header, &rows) + &ignored_lines(&config)
    })
}

/// The layer and file `set`, `unset` and `edit` write: `--global`, `--project`, else the
/// project's file inside a project and the global one outside (said in a note).
fn target(
    ctx: &Ctx,
    cwd: &Path,
    root: Option<&Path>,
    t: &ConfigTarget,
) -> CliResult<(Layer, PathBuf)> {
    if t.workspace {
        let path = layer_path(&ctx.home, root, Layer::Workspace)
            .unwrap_or_else(|| cwd.join(agentbox_boxes::project::PROJECT_FILE));
        return Err(ConfigError::WorkspaceReadOnly { path }.into());
    }
    let layer = if t.global {
        Layer::Global
    } else if t.project || root.is_some() {
        Layer::Project
    } else {
        Layer::Global
    };
    let path = layer_path(&ctx.home, root, layer).ok_or_else(|| ConfigError::NoProject {
        dir: cwd.to_owned(),
    })?;
    if layer == Layer::Global && !t.global {
        ctx.note(format!(
            "not inside a project: using the global configuration ({})",
            path.display()
        ));
    }
    Ok((layer, path))
}

/// Before a project's file is written: the home records which root the project's state
/// directory belongs to (`config list-projects` shows it).
fn remember(ctx: &Ctx, root: Option<&Path>, layer: Layer) -> CliResult {
    if let (Layer::Project, Some(root)) = (layer, root) {
        agentbox_boxes::records::registry::remember_project(&ctx.home, root)?;
    }
    Ok(())
}

/// `config list-projects`: every project the home knows, with its boxes and config file.
fn list_projects(ctx: &Ctx) -> CliResult {
    let projects = agentbox_boxes::records::registry::projects(&ctx.home)?;
    ctx.out(&projects, || {
        if projects.is_empty() {
            return "no projects yet (`agentbox create` inside one, or `agentbox config set` there)\n"
                .to_owned();
        }
        let rows: Vec<Vec<String>> = projects
            .iter()
            .map(|p| {
                vec![
                    p.root.display().to_string(),
                    p.boxes.to_string(),
                    p.next_index.to_string(),
                    p.config
                        .as_ref()
                        .map_or("-".to_owned(), |c| c.display().to_string()),
                ]
            })
            .collect();
        render::columns(&["PROJECT", "BOXES", "NEXT #", "CONFIG"], &rows)
    })
}

/// After a write: the file's remaining problems, and a higher layer that hides the change.
fn after_write(ctx: &Ctx, root: Option<&Path>, layer: Layer, path: &Path, key: &str) {
    match config::check_file(path, layer) {
        Ok(w) => warn(&w),
        Err(e) => eprintln!("agentbox: warning: the file still has a problem: {e}"),
    }
    if let Ok(c) = Config::load(&ctx.home, root) {
        if let Ok(e) = c.entry(key) {
            if e.origin.layer > layer {
                ctx.note(format!(
                    "note: {} sets {key} = {}, which wins",
                    origin_text(e),
                    shown(e.value.as_ref())
                ));
            }
        }
    }
}

fn set(
    ctx: &Ctx,
    cwd: &Path,
    root: Option<&Path>,
    key: &str,
    values: &[String],
    t: &ConfigTarget,
) -> CliResult {
    let value = config::parse_set_args(key, values)?;
    let (layer, path) = target(ctx, cwd, root, t)?;
    remember(ctx, root, layer)?;
    config::set_in(&path, key, &value)?;
    after_write(ctx, root, layer, &path, key);
    ctx.out(
        &json!({"key": key, "value": value.to_json(), "layer": layer, "file": path}),
        || {
            format!(
                "{key} = {} ({} {})\n",
                value.display(),
                layer.name(),
                path.display()
            )
        },
    )
}

fn unset(ctx: &Ctx, cwd: &Path, root: Option<&Path>, key: &str, t: &ConfigTarget) -> CliResult {
    let key = &config::written_name(key)?;
    let (layer, path) = target(ctx, cwd, root, t)?;
    let removed = config::unset_in(&path, key)?;
    if removed {
        after_write(ctx, root, layer, &path, key);
    } else {
        ctx.note(format!("{key} was not set in {}", path.display()));
    }
    ctx.out(
        &json!({"key": key, "removed": removed, "layer": layer, "file": path}),
        || {
            if removed {
                format!("{key} unset ({} {})\n", layer.name(), path.display())
            } else {
                String::new()
            }
        },
    )
}

fn path(ctx: &Ctx, cwd: &Path, root: Option<&Path>, t: &ConfigTarget) -> CliResult {
    let chosen = if t.global {
        Some(Layer::Global)
    } else if t.project {
        Some(Layer::Project)
    } else if t.workspace {
        Some(Layer::Workspace)
    } else {
        None
    };
    if let Some(layer) = chosen {
        let p = layer_path(&ctx.home, root, layer).ok_or_else(|| ConfigError::NoProject {
            dir: cwd.to_owned(),
        })?;
        return ctx.out(&json!({"layer": layer, "file": p}), || {
            format!("{}\n", p.display())
        });
    }
    let layers = [Layer::Global, Layer::Project, Layer::Workspace];
    let files: Vec<_> = layers
        .iter()
        .map(|l| (*l, layer_path(&ctx.home, root, *l)))
        .collect();
    ctx.out(
        &json!({
            "project_root": root,
            "global": files[0].1,
            "project": files[1].1,
            "workspace": files[2].1,
        }),
        || {
            let rows: Vec<Vec<String>> = files
                .iter()
                .map(|(l, p)| {
                    let where_ = match (p, l) {
                        (None, _) => "(not inside a project)".to_owned(),
                        (Some(p), Layer::Workspace) => {
                            format!("{} (defaults:{})", p.display(), workspace_trust(ctx, p))
                        }
                        (Some(p), _) => p.display().to_string(),
                    };
                    vec![l.name().to_owned(), where_]
                })
                .collect();
            render::columns(&["LAYER", "FILE"], &rows)
        },
    )
}

/// Whether the workspace file at `path` is trusted, for `config path`.
fn workspace_trust(ctx: &Ctx, path: &Path) -> &'static str {
    use config::trusted::{check, FileTrust};
    match fs_err::read(path) {
        Err(_) => "",
        Ok(bytes) => match check(&ctx.home, path, &bytes) {
            Ok(FileTrust::Trusted) => ", trusted",
            Ok(FileTrust::Changed { .. }) => {
                ", changed since trusted: only stricter settings apply"
            }
            Ok(FileTrust::Untrusted) | Err(_) => ", untrusted: only stricter settings apply",
        },
    }
}

fn edit(ctx: &Ctx, cwd: &Path, root: Option<&Path>, t: &ConfigTarget) -> CliResult {
    let (layer, path) = target(ctx, cwd, root, t)?;
    remember(ctx, root, layer)?;
    if !path.exists() {
        if let Some(dir) = path.parent() {
            fs_err::create_dir_all(dir)?;
        }
        let header = format!(
            "# agentbox configuration ({} layer).\n# Keys: `agentbox config list`; schema: `agentbox config schema`.\n# Example:\n# box:\n#   network: none\n",
            layer.name()
        );
        agentbox_core::atomic::write_atomic(&path, header.as_bytes())?;
    }
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(std::env::var_os)
        .find(|v| !v.is_empty())
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vi".to_owned());
    // Through the shell, as git does, so an editor setting may carry arguments (`code -w`).
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&path)
        .status()
        .map_err(|e| {
            CliError::new(
                crate::errors::ExitCode::Failure,
                format!("cannot run the editor {editor:?}: {e}"),
                None,
            )
        })?;
    if !status.success() {
        return Err(CliError::new(
            crate::errors::ExitCode::Failure,
            format!(
                "the editor {editor:?} failed ({status}); {} was left as it is",
                path.display()
            ),
            Some("set $VISUAL or $EDITOR to the editor to use".into()),
        ));
    }
    let warnings = config::check_file(&path, layer)?;
    warn(&warnings);
    ctx.note(format!("{} is valid", path.display()));
    ctx.out(
        &json!({
            "layer": layer,
            "file": path,
            "warnings": warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
        String::new,
    )
}
