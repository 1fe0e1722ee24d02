//! Making a box: the settings a front end gives, their merge over the layered configuration,
//! and the one transaction that makes the box.
//!
//! [`create`] owns its rollback: until the box's record is written nothing of the box is
//! visible (the workspace is staged in the store, the environment adopts it in one step), and
//! a failure after the environment exists removes it again. Front ends fill a [`Spec`], call
//! [`create`], and render the [`Created`] it returns.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentbox_core::home::Home;
use agentbox_core::name::BoxName;
use agentbox_sandbox::proto::Network;
use agentbox_store::{Source, Store};
use chrono::Utc;

use crate::cgroup::Limits;
use crate::config::{self, Config, ConfigError, ConfigWarning};
use crate::lifecycle::seeding::SeededRepo;
use crate::progress::Progress;
use crate::records::record::{self, BoxDirs, BoxRecord};
use crate::{BoxError, Result};

pub use crate::types::CreateOptions;

/// Settings of a new box given by the caller (the flags of `agentbox create`): each one that
/// is set wins over the configuration's value for its key.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `box.network`: `host`, `none` or `private`.
    pub network: Option<String>,
    /// `box.capture`.
    pub capture: Option<bool>,
    /// `box.broker`.
    pub broker: Option<bool>,
    /// `box.env` (`KEY=VALUE` each; replaces the configured list when not empty).
    pub env: Vec<String>,
    /// `box.ignore` (replaces the configured list when not empty).
    pub ignore: Vec<String>,
    /// `box.hostPaths` (replaces the configured list when not empty).
    pub host_paths: Vec<String>,
    /// `box.keep`.
    pub keep: Option<u64>,
    /// `box.memory`, as text (`512M`).
    pub memory: Option<String>,
    /// `box.pids`.
    pub pids: Option<u64>,
    /// `box.cpus`.
    pub cpus: Option<f64>,
    /// The box's disk limit, as text (`10G`); `--disk` only (see `agentbox_store::disk`).
    pub disk: Option<String>,
    /// `box.image`.
    pub image: Option<String>,
    /// `git.carry`.
    pub carry: Option<bool>,
    /// `git.withEnv`.
    pub with_env: Option<bool>,
    /// Host ports forwarded into the box (`[HOSTIP:]HOST:BOX`). Per box, so never from
    /// configuration: two boxes cannot publish one host port.
    pub publish: Vec<String>,
}

/// `settings` over the effective configuration of the project at `project_root` (only the
/// global one when `None`), with the configuration's warnings (unknown keys). A bad value
/// is [`BoxError::BadSetting`] naming its key; a bad file is a configuration error.
pub fn options(
    home: &Home,
    project_root: Option<&Path>,
    settings: &Settings,
) -> Result<(CreateOptions, Vec<ConfigWarning>)> {
    let mut config = Config::load(home, project_root).map_err(config_error)?;
    let warnings = config.warnings().to_vec();
    let text = |b: Option<bool>| b.map(|b| vec![b.to_string()]);
    let one = |v: Option<String>| v.map(|v| vec![v]);
    let list = |v: &Vec<String>| Some(v.clone()).filter(|v| !v.is_empty());
    for (key, values) in [
        ("box.network", one(settings.network.clone())),
        ("box.capture", text(settings.capture)),
        ("box.broker", text(settings.broker)),
        ("box.env", list(&settings.env)),
        ("box.ignore", list(&settings.ignore)),
        ("box.hostPaths", list(&settings.host_paths)),
        ("box.keep", one(settings.keep.map(|n| n.to_string()))),
        ("box.memory", one(settings.memory.clone())),
        ("box.pids", one(settings.pids.map(|n| n.to_string()))),
        ("box.cpus", one(settings.cpus.map(|n| n.to_string()))),
        ("box.image", one(settings.image.clone())),
        ("git.carry", text(settings.carry)),
        ("git.withEnv", text(settings.with_env)),
    ] {
        let Some(values) = values else { continue };
        let value = config::parse_set_args(key, &values).map_err(|e| match e {
            ConfigError::InvalidValue { reason, .. } => BoxError::BadSetting {
                key: key.to_owned(),
                given: values.join(" "),
                reason,
            },
            other => config_error(other),
        })?;
        config.apply_flag(key, value).map_err(config_error)?;
    }
    let e = config.effective();
    let publish = agentbox_sandbox::net::parse_publish(&settings.publish).map_err(|err| {
        // The message already quotes the value.
        BoxError::BadSetting {
            key: "publish".into(),
            given: String::new(),
            reason: err.to_string(),
        }
    })?;
    if !publish.is_empty() && e.network != Network::Private {
        return Err(BoxError::PublishNeedsPrivate);
    }
    let options = CreateOptions {
        network: e.network,
        publish,
        capture: e.capture,
        broker: e.broker,
        env: e.env,
        ignore: e.ignore,
        host_paths: e.host_paths,
        home_tools: e.home_tools,
        keep: e.keep,
        limits: Limits {
            memory_bytes: e.memory_bytes,
            pids: e.pids,
            cpus: e.cpus,
        },
        image: e.image,
        carry: e.carry,
        with_env: if e.with_env {
            e.env_patterns
        } else {
            Vec::new()
        },
    };
    options
        .limits
        .validate()
        .map_err(|e| BoxError::BadSetting {
            key: "limits".into(),
            given: String::new(),
            reason: e.to_string(),
        })?;
    Ok((options, warnings))
}

fn config_error(e: ConfigError) -> BoxError {
    BoxError::Config(Box::new(e))
}

/// Where a new box's `/workspace` comes from.
#[derive(Debug, Clone)]
pub enum Workspace {
    /// A copy of this directory (its repositories become the box's).
    From(PathBuf),
    /// The project the directory is in (its nearest ancestor with `agentbox.yaml` or
    /// `.git`), else empty.
    ProjectOf(PathBuf),
    /// Empty.
    Empty,
}

/// Everything a box is made from.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its name (`None`: `<project>-<n>`).
    pub name: Option<String>,
    pub workspace: Workspace,
    /// Start the box's repositories at this ref instead of the host's HEAD (and carry
    /// nothing over).
    pub from_ref: Option<String>,
    /// Copy the directory as it is, without making its repositories the box's.
    pub no_git: bool,
    pub settings: Settings,
    /// Start from this checkpoint of the project (`None`: its default, unless
    /// `no_checkpoint`).
    pub checkpoint: Option<String>,
    pub no_checkpoint: bool,
    /// From a checkpoint: re-branch, but carry none of the host's uncommitted work over
    /// (`None`: `box.resyncOnStart`).
    pub resync: Option<bool>,
    /// Use a checkpoint whose base changed since it was made (with a warning); otherwise
    /// that is [`BoxError::CheckpointStale`], for the front end to ask.
    pub accept_stale: bool,
    /// The provider to run it (`local`, `docker`; `None`: `box.provider`, else the
    /// default).
    pub provider: Option<String>,
    /// Where that provider runs it ([`BoxRecord::engine`]: `--docker-host`).
    pub engine: Option<String>,
    /// Build the box's image from this Dockerfile (`--dockerfile`).
    pub dockerfile: Option<PathBuf>,
}

/// A box just made.
#[derive(Debug)]
pub struct Created {
    pub record: BoxRecord,
    /// Its first node.
    pub head: String,
    /// Each repository made from the host's, with what was carried over.
    pub seeded: Vec<SeededRepo>,
    /// From a checkpoint: the stage (as the box sees it) the in-box merge still has to
    /// take the fresh workspace from (see [`crate::lifecycle::reseed`]).
    pub reseed: Option<String>,
}

/// Make a box from `spec` in agentbox home `home`, to be run by `provider`. The box is
/// stopped; its first command starts it.
pub fn create(
    home: &Home,
    spec: &Spec,
    provider: &dyn crate::provider::Provider,
    progress: &dyn Progress,
    checkpoint: Option<&crate::checkpoints::checkpoint::Manifest>,
) -> Result<Created> {
    let chosen = spec
        .name
        .as_deref()
        .map(|n| crate::records::registry::check_new_name(home, n))
        .transpose()?;
    let config_dir = match &spec.workspace {
        Workspace::From(d) | Workspace::ProjectOf(d) => Some(d.clone()),
        Workspace::Empty => None,
    };
    let (mut o, warnings) = options(
        home,
        config_dir
            .as_deref()
            .and_then(crate::project::find_root)
            .as_deref(),
        &spec.settings,
    )?;
    if let Some(m) = checkpoint {
        // The checkpoint's tree lies over its own base.
        o.image = m.base.image.clone();
    }
    for w in &warnings {
        progress.note(&format!("agentbox: warning: {w}"));
    }
    let rootless = !rustix::process::geteuid().is_root();
    if rootless && o.image.is_some() {
        return Err(BoxError::NeedsRoot {
            operation: "a box on an image".into(),
            reason: "in this version; run it with sudo, or create the box on the host's own tools (without --image)"
                .into(),
        });
    }
    if o.network == Network::Private {
        // Checked again whenever the box starts; here, before anything is copied.
        let what = match &spec.name {
            Some(n) => format!("box {n:?}"),
            None => "the new box".to_owned(),
        };
        agentbox_sandbox::net::preflight(&what, rootless)?;
    }
    if !o.limits.is_empty() {
        crate::cgroup::available().map_err(|e| BoxError::LimitsUnavailable {
            reason: e.to_string(),
        })?;
    }
    let disk = spec
        .settings
        .disk
        .as_deref()
        .map(|text| {
            Limits::parse_memory(text).map_err(|_| BoxError::BadSetting {
                key: "--disk".into(),
                given: text.to_owned(),
                reason: "expected a size such as 512M or 10G".into(),
            })
        })
        .transpose()?;
    let source = match &spec.workspace {
        Workspace::From(d) => {
            let why = if !d.exists() {
                Some("does not exist")
            } else if !d.is_dir() {
                Some("is not a directory")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(BoxError::BadWorkspace {
                    path: d.clone(),
                    why: why.into(),
                });
            }
            Some(fs_err::canonicalize(d)?)
        }
        Workspace::ProjectOf(dir) => {
            let found = crate::project::find_root(dir);
            match &found {
                Some(p) => progress.note(&format!("making the box from project {}", p.display())),
                None => progress.note(
                    "not inside a project: the box's /workspace starts empty (-C DIR makes it from a directory)",
                ),
            }
            found
        }
        Workspace::Empty => None,
    };
    let store = Store::open_or_init(&home.store_dir(), None)?;
    if disk.is_some() {
        // Before anything is copied: say what the store's filesystem lacks.
        store.check_disk_limit()?;
    }
    let held = provider.trees() == crate::provider::Trees::Held;
    if let Some(m) = checkpoint {
        // A checkpoint's tree is where its provider keeps it: only that provider's boxes
        // start from it.
        if m.provider_kind() != provider.kind() {
            return Err(BoxError::BadSetting {
                key: "--checkpoint".into(),
                given: m.name.clone(),
                reason: format!(
                    "it is a checkpoint of {} boxes, and this box would be run by the {} provider (give --provider {}, or --no-checkpoint)",
                    m.provider_kind(),
                    provider.kind(),
                    m.provider_kind()
                ),
            });
        }
    }
    if held {
        if disk.is_some() {
            return Err(provider.cannot(
                spec.name.as_deref().unwrap_or("(new)"),
                "limit a box's disk (--disk)",
            ));
        }
    } else if spec.engine.is_some() || spec.dockerfile.is_some() {
        return Err(BoxError::BadSetting {
            key: "--provider".into(),
            given: provider.kind().to_owned(),
            reason: "--docker-host and --dockerfile are for boxes of the docker provider (--provider docker)".into(),
        });
    } else if let Some(image) = &o.image {
        crate::records::images::get(home, image)?;
    }
    let taken = |n: &str| BoxDirs::new(home, n).record().exists() || store.env(n).is_ok();
    if let Some(n) = spec.name.as_deref().filter(|n| taken(n)) {
        return Err(BoxError::BoxExists { name: n.to_owned() });
    }
    let index = crate::records::registry::allocate_index(home, source.as_deref())?;
    let name = match chosen {
        Some(n) => n,
        None => agentbox_core::name::BoxName::new(crate::records::registry::default_name(
            home,
            source.as_deref(),
            index,
        ))?,
    };
    // A port taken now would fail the box's first start: say so before copying anything.
    agentbox_sandbox::net::check_ports(&name, &o.publish)?;
    // The first node: the box's root layer, holding the workspace copy.
    // Held until the box's environment exists: see `Store::hold`.
    let _staging = store.hold("create a box")?;
    let seed_opts = agentbox_git::SeedOpts {
        from_ref: spec.from_ref.clone(),
        no_carry: !o.carry || (checkpoint.is_some() && spec.resync == Some(false)),
        with_env: o.with_env.clone(),
        exclude: Vec::new(),
    };
    let mut image = o.image.clone();
    let mut conflicts = Vec::new();
    let (state, seeded, reseed) = match checkpoint {
        _ if held => {
            let tree = provider.create_tree(
                &crate::provider::NewBox {
                    name: &name,
                    source: source.as_deref(),
                    no_git: spec.no_git,
                    seed: &seed_opts,
                    options: &o,
                    engine: spec.engine.as_deref(),
                    dockerfile: spec.dockerfile.as_deref(),
                    checkpoint: checkpoint.map(|m| m.for_provider()).as_ref(),
                },
                progress,
            )?;
            let state = match checkpoint {
                None => {
                    let message = match &source {
                        Some(s) => format!("box created from {}", s.display()),
                        None => "box created".to_owned(),
                    };
                    store.create_held_env(&name, tree.held.clone(), &message)
                }
                // Its history starts at the checkpoint's node, as a local box's does; the
                // provider's merge is its first own node.
                Some(m) => held_from_checkpoint(&store, m, &name, tree.held.clone()),
            };
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    provider.forget(&name);
                    let _ = store.remove_env(&name);
                    return Err(e.into());
                }
            };
            image = tree.image;
            conflicts = tree.conflicts;
            (state, tree.seeded, None)
        }
        Some(m) => {
            let (state, seeded, stage) = crate::lifecycle::reseed::stage(
                home,
                &store,
                m,
                &name,
                source.as_deref(),
                &seed_opts,
                progress,
            )?;
            (state, seeded, Some(stage))
        }
        None => {
            let (state, seeded) = fresh_env(
                home,
                &store,
                &name,
                source.as_deref(),
                spec.no_git,
                rootless,
                &seed_opts,
                progress,
            )?;
            (state, seeded, None)
        }
    };
    if let Some(bytes) = disk {
        if let Err(e) = store.set_disk_limit(&name, bytes) {
            let _ = store.remove_env(&name);
            return Err(e.into());
        }
    }
    let rec = BoxRecord {
        id: agentbox_core::id::BoxId::random(),
        name: name.clone(),
        display_name: None,
        provider: provider.kind().to_owned(),
        project: source.clone(),
        index,
        last_agent: None,
        isolated_config: Vec::new(),
        created: Utc::now(),
        source,
        network: o.network,
        publish: o.publish,
        repos: seeded.iter().map(|r| r.record.clone()).collect(),
        rootless,
        image,
        capture: o.capture,
        env: o.env,
        ignore: o.ignore,
        host_paths: o.host_paths,
        home_tools: o.home_tools,
        limits: o.limits,
        keep: Some(o.keep),
        checkpoint: checkpoint.map(|m| m.name.clone()),
        lineage: checkpoint
            .map(|m| {
                std::iter::once(m.name.clone())
                    .chain(m.lineage.iter().cloned())
                    .collect()
            })
            .unwrap_or_default(),
        resync_conflicts: conflicts,
        broker: o.broker,
        engine: spec.engine.clone(),
    };
    let dirs = BoxDirs::new(home, &name);
    let written = fs_err::create_dir_all(&dirs.dir)
        .map_err(BoxError::from)
        .and_then(|()| record::write(home, &rec));
    if let Err(e) = written {
        if held {
            provider.forget(&name);
        }
        let _ = store.remove_env(&name);
        let _ = fs_err::remove_dir_all(&dirs.dir);
        return Err(e);
    }
    Ok(Created {
        record: rec,
        head: state.head.into_string(),
        seeded,
        reseed,
    })
}

/// The held environment of box `name` made from checkpoint `m`: forked from the
/// checkpoint's node, then `held` (its provider's merge) committed as its first own node.
fn held_from_checkpoint(
    store: &Store,
    m: &crate::checkpoints::checkpoint::Manifest,
    name: &BoxName,
    held: agentbox_store::Held,
) -> agentbox_store::Result<agentbox_store::EnvState> {
    let full_ref = crate::checkpoints::checkpoint::ref_name(m.project.as_deref(), &m.name);
    store.fork_node(&full_ref, name, None)?;
    store.commit_held(
        name,
        held,
        agentbox_store::CommitOpts {
            message: format!("box created from checkpoint {}", m.name),
            ..Default::default()
        },
    )?;
    store.env(name)
}

/// The environment of a new box from its source directory: a staged copy (its
/// repositories seeded) made the box's first node.
#[allow(clippy::too_many_arguments)]
fn fresh_env(
    home: &Home,
    store: &Store,
    name: &BoxName,
    source: Option<&Path>,
    no_git: bool,
    rootless: bool,
    seed_opts: &agentbox_git::SeedOpts,
    progress: &dyn Progress,
) -> Result<(agentbox_store::EnvState, Vec<SeededRepo>)> {
    let staged = agentbox_store::transfer::staging(store, "box")?;
    // A staging directory the backend can adopt without a copy (a subvolume on btrfs).
    match store.backend().staging_dir_maker() {
        Some(make) => make(&staged).map_err(agentbox_store::Error::Io)?,
        None => fs_err::create_dir_all(&staged)?,
    }
    fs_err::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))?;
    let ws = staged.join("workspace");
    let mut seeded = Vec::new();
    let copied = progress.busy("copying the workspace", &mut || {
        if rootless {
            // Mount points for the host's directories, bound read-only into the box.
            agentbox_sandbox::init::host_skeleton(&staged)?;
        }
        match &source {
            Some(src) => {
                seeded = crate::lifecycle::seeding::seed_workspace(
                    home, src, name, &ws, seed_opts, !no_git,
                )
                .map_err(BoxError::Seed)?;
            }
            None => fs_err::create_dir(&ws)?,
        }
        Ok(())
    });
    if let Err(e) = copied {
        let _ = fs_err::remove_dir_all(&staged);
        return Err(e);
    }
    let message = match &source {
        Some(s) => format!("box created from {}", s.display()),
        None => "box created".to_owned(),
    };
    let state = store.create_env(name, None, Source::Staged(staged), &message)?;
    Ok((state, seeded))
}
