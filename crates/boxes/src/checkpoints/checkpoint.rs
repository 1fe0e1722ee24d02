//! Warm checkpoints: a project's named captures of a box, which new boxes of the project
//! start from (see [`crate::lifecycle::reseed`] for how a box is made from one).
//!
//! A checkpoint is two things, written in this order:
//!
//! 1. a store ref `checkpoints/<project key>/<name>` naming a detached node: the box's tree
//!    at capture with the [cleanup](Cleanup) applied (the running box is not touched), kept
//!    by GC, retention and the destroy of its source box until the ref goes;
//! 2. its manifest, `<home>/projects/<key>/checkpoints/<name>.json` ([`Manifest`]).
//!
//! The ref is the commit point: a manifest without its ref is a leftover (`prune` removes
//! it), a ref without a manifest is listed as damaged. Names are unique per project;
//! default names are `<box>-<n>`, `n` monotonic per box name and never reused (the counters
//! are in `<key>/checkpoints/counters.json`). Every change to a project's checkpoints holds
//! `<key>/checkpoints/lock`.
//!
//! One file (over 600 lines): a project's checkpoint refs, manifests, default and name
//! counters change together under that lock, in that order; every operation on them is
//! here so the order is kept in one place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentbox_core::atomic::{read_json_opt, write_json};
use agentbox_core::home::Home;
use agentbox_core::lock::{FileLock, Mode};
use agentbox_store::derive::{Cleanup, DetachOpts};
use agentbox_store::CommitOpts;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::facade::Boxes;
use crate::records::record;
use crate::{BoxError, Result};

/// The manifest's format version.
pub const SCHEMA: u32 = 1;

/// How a checkpoint's node is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointKind {
    /// One small layer over the source box's chain (shares its data).
    Layered,
    /// Self-contained: the node depends on no layer of the chain it came from (on `layers`,
    /// one complete layer; on `btrfs` every node is a self-contained subvolume anyway).
    Flattened,
}

/// What a checkpoint was built on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    /// `None`: the host's own `/`; else the image's name.
    pub image: Option<String>,
    /// A content fingerprint of the base (see [`fingerprint`]).
    pub fingerprint: String,
}

/// One repository of the source box at capture.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepoAt {
    pub repository: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    pub branch: String,
    /// The branch's tip as the host has it (`None`: never synced).
    pub tip: Option<String>,
}

/// A checkpoint's manifest (JSON). Holds no value of the source box's settings that could
/// be secret (`--env` values, host paths): only names, ids and fingerprints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: u32,
    pub name: String,
    pub project: Option<PathBuf>,
    pub kind: CheckpointKind,
    pub node: String,
    /// The checkpoints this one descends from, nearest first (the source box's lineage).
    pub lineage: Vec<String>,
    pub base: Base,
    pub source_box: String,
    pub source_box_id: String,
    pub repos: Vec<RepoAt>,
    pub version: String,
    pub created: DateTime<Utc>,
    /// What the cleanup removed and emptied.
    pub cleaned: Cleaned,
    /// The provider whose boxes it is for, when it holds the checkpoint's tree (`docker`:
    /// an image on an engine); `None`: the local provider's, in the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Where that provider keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldCheckpoint>,
}

pub use crate::provider::HeldCheckpoint;

impl Manifest {
    /// The provider whose boxes start from this checkpoint (`local` unless it says).
    pub fn provider_kind(&self) -> &str {
        self.provider.as_deref().unwrap_or("local")
    }

    /// What a provider making a box from it needs.
    pub fn for_provider(&self) -> crate::provider::FromCheckpoint<'_> {
        crate::provider::FromCheckpoint {
            name: &self.name,
            provider: self.provider_kind(),
            base_image: self.base.image.as_deref(),
            held: self.held.as_ref(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cleaned {
    pub deleted: usize,
    pub truncated: usize,
    pub bytes: u64,
    /// How the cleanup command (`checkpoint.cleanupCommand`) failed, when it did: its
    /// status and the start of its output (the box's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_failed: Option<String>,
}

/// Whether a checkpoint can still be used as it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Freshness {
    /// Its base is as it was.
    Fresh,
    /// Its base changed (the host's system or toolchains, or the image).
    Stale,
    /// Its base image is gone.
    BaseMissing,
    /// Its node is gone (damaged store, or removed by hand).
    NodeMissing,
}

impl Freshness {
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::BaseMissing => "base-missing",
            Freshness::NodeMissing => "node-missing",
        }
    }
}

/// A checkpoint as listed.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    #[serde(flatten)]
    pub manifest: Manifest,
    pub state: Freshness,
    /// Whether it is its project's default (`box.defaultCheckpoint`).
    pub default: bool,
}

/// What `checkpoint create` is asked for.
#[derive(Debug, Clone, Default)]
pub struct CheckpointSpec {
    /// The box to capture.
    pub box_name: String,
    pub name: Option<String>,
    pub set_default: bool,
    /// Flatten (`--merged`).
    pub merged: bool,
    /// Move an existing name.
    pub replace: bool,
    /// Asked from inside the box itself (the in-box `agentbox`): the box may add a
    /// checkpoint of its own tree under a new name, never move an existing one or make one
    /// its project's default — those decide what every future box of the project starts
    /// from, which only the user on the host may (see [`Boxes::checkpoint_create`]).
    pub in_box: bool,
}

/// What a capture made: the checkpoint's node, what its cleanup did, and where a provider
/// that holds it keeps it.
struct Captured {
    pub node: String,
    pub cleaned: Cleaned,
    pub held: Option<HeldCheckpoint>,
}

/// Names a checkpoint may not have: its manifest's file would be one of the project's
/// own files beside the manifests (`counters.json`, the default names' counters).
const RESERVED: &[&str] = &["counters"];

/// Check a checkpoint name given by the user or a box: a valid ref name, not reserved.
fn validate_name(name: &str) -> Result<()> {
    agentbox_store::names::validate("checkpoint", name)?;
    if RESERVED.contains(&name) {
        return Err(agentbox_store::Error::InvalidName {
            name: name.to_owned(),
            reason: "the name is reserved for the project's own checkpoint records".into(),
        }
        .into());
    }
    Ok(())
}

/// The project key as refs and directories use it (`none` outside a project).
pub fn project_key(project: Option<&Path>) -> String {
    match project {
        // Prefixed: a ref name is never all hex.
        Some(p) => format!("p{}", agentbox_core::home::project_key(p)),
        None => "none".to_owned(),
    }
}

/// The store ref of checkpoint `name` of `project`.
pub fn ref_name(project: Option<&Path>, name: &str) -> String {
    format!("checkpoints/{}/{name}", project_key(project))
}

fn dir(home: &Home, project: Option<&Path>) -> PathBuf {
    match project {
        Some(p) => home.project_dir(p).join("checkpoints"),
        None => home
            .root()
            .join("projects")
            .join("none")
            .join("checkpoints"),
    }
}

pub(crate) fn manifest_path(home: &Home, project: Option<&Path>, name: &str) -> PathBuf {
    dir(home, project).join(format!("{name}.json"))
}

pub(crate) fn lock(home: &Home, project: Option<&Path>) -> Result<FileLock> {
    let d = dir(home, project);
    fs_err::create_dir_all(&d)?;
    Ok(FileLock::acquire(
        &d.join("lock"),
        Mode::Exclusive,
        "checkpoints",
        "change checkpoints",
    )?)
}

/// A fingerprint of what a box of `image` (`None`: the host's `/`) is built on: an image's
/// record (name, source, import time); for the host, its OS release and package database.
pub fn fingerprint(home: &Home, image: Option<&str>) -> Option<String> {
    let mut h = blake3::Hasher::new();
    match image {
        Some(name) => {
            let img = crate::records::images::get(home, name).ok()?;
            h.update(img.name.as_bytes());
            h.update(img.source.as_bytes());
            h.update(img.imported.to_rfc3339().as_bytes());
        }
        None => {
            for f in [
                "/etc/os-release",
                "/var/lib/dpkg/status",
                "/var/lib/rpm/rpmdb.sqlite",
                "/lib/apk/db/installed",
            ] {
                if let Ok(bytes) = std::fs::read(f) {
                    h.update(f.as_bytes());
                    h.update(&bytes);
                }
            }
        }
    }
    Some(h.finalize().to_hex()[..16].to_owned())
}

/// Files that carry a box's own secrets, never kept in a checkpoint: the ignored
/// secret-bearing files carried into its workspace (`git.envPatterns`), and agents'
/// credential files. Patterns over paths from the box's root.
fn secret_patterns(env_patterns: &[String]) -> Vec<String> {
    let mut out: Vec<String> = env_patterns
        .iter()
        .map(|p| format!("/workspace/**/{p}"))
        .collect();
    out.extend(
        [
            "**/.claude/.credentials.json",
            "**/.codex/auth.json",
            "**/.local/share/opencode/auth.json",
            "**/.git-credentials",
            "**/.netrc",
        ]
        .iter()
        .map(|s| (*s).to_owned()),
    );
    out
}

impl Boxes {
    /// Capture box `spec.box_name` as a checkpoint of its project. Asked from inside the
    /// box (`spec.in_box`), `replace` and `set_default` are refused and so is a name that
    /// exists: a box adds checkpoints, the user promotes them on the host.
    pub fn checkpoint_create(&self, spec: &CheckpointSpec) -> Result<Checkpoint> {
        if spec.in_box && (spec.replace || spec.set_default) {
            return Err(BoxError::CheckpointFromBox {
                name: spec.name.clone().unwrap_or_else(|| "NAME".to_owned()),
            });
        }
        let rec = record::read(self.home(), &spec.box_name)?;
        let project = rec.project.clone();
        let config = crate::config::Config::load(self.home(), project.as_deref())
            .map_err(|e| BoxError::Config(Box::new(e)))?
            .effective();
        let _lock = lock(self.home(), project.as_deref())?;
        let store = self.store()?;
        let name = match &spec.name {
            Some(n) => {
                validate_name(n)?;
                n.clone()
            }
            None => next_name(self.home(), store, project.as_deref(), &rec.name)?,
        };
        let full_ref = ref_name(project.as_deref(), &name);
        if (spec.in_box || !spec.replace) && taken(self.home(), store, project.as_deref(), &name)? {
            return Err(BoxError::CheckpointExists { name });
        }
        // The name the project's configuration makes its default, which no checkpoint has
        // (removed by hand, or not made yet): a box's capture of it would be the default.
        if spec.in_box && default_of(self.home(), project.as_deref())?.as_deref() == Some(&name) {
            return Err(BoxError::CheckpointFromBox { name });
        }
        // The box's tree now: a running box through its provider (serialised with
        // auto-capture); nothing changed since HEAD is HEAD itself.
        let node = match self.commit(
            &rec.name,
            CommitOpts {
                message: format!("checkpoint {name}"),
                ..CommitOpts::default()
            },
        ) {
            Ok(n) => n.id,
            Err(BoxError::Store(agentbox_store::Error::Refused { .. })) => {
                store.env(&rec.name)?.head
            }
            Err(e) => return Err(e),
        };
        let mut cleanup = Cleanup::checkpoint();
        cleanup
            .delete
            .extend(config.checkpoint_cleanup.iter().cloned());
        cleanup.delete.extend(secret_patterns(&config.env_patterns));
        let flatten = spec.merged || rec.lineage.len() as u64 >= config.checkpoint_max_layers;
        let captured = if self.held(&rec.name)? {
            let (node, tree, held) = crate::checkpoints::held::capture(
                self,
                &rec,
                &crate::provider::CheckpointAsk {
                    name: &name,
                    project_key: &project_key(project.as_deref()),
                    node: node.as_str(),
                    cleanup: &cleanup,
                    command: config.checkpoint_cleanup_command.as_deref(),
                    flatten,
                },
                &full_ref,
            )?;
            Captured {
                node,
                cleaned: Cleaned {
                    deleted: tree.deleted,
                    truncated: tree.truncated,
                    // Not measured: the capture's files are the engine's.
                    bytes: 0,
                    command_failed: tree.command_failed,
                },
                held: Some(held),
            }
        } else {
            let derived = store.derive(
                &rec.name,
                &node,
                &cleanup,
                DetachOpts::new(&full_ref, format!("checkpoint {name} of box {}", rec.name)),
            )?;
            let node = if flatten {
                store
                    .flatten(
                        &rec.name,
                        &derived.node.id,
                        DetachOpts::new(&full_ref, format!("checkpoint {name} (flattened)")),
                    )?
                    .id
            } else {
                derived.node.id.clone()
            };
            Captured {
                node: node.into_string(),
                cleaned: Cleaned {
                    deleted: derived.deleted,
                    truncated: derived.truncated,
                    bytes: derived.bytes,
                    command_failed: None,
                },
                held: None,
            }
        };
        let repos = rec
            .repos
            .iter()
            .map(|g| RepoAt {
                repository: g.repo.clone(),
                sub: g.sub.clone(),
                branch: g.branch.clone(),
                tip: agentbox_git::branch_tip(&g.repo, &g.branch, &g.objects)
                    .ok()
                    .flatten(),
            })
            .collect();
        let manifest = Manifest {
            schema: SCHEMA,
            name: name.clone(),
            project: project.clone(),
            kind: if flatten {
                CheckpointKind::Flattened
            } else {
                CheckpointKind::Layered
            },
            node: captured.node,
            lineage: rec.lineage.clone(),
            base: Base {
                image: rec.image.clone(),
                fingerprint: fingerprint(self.home(), rec.image.as_deref()).unwrap_or_default(),
            },
            source_box: rec.name.to_string(),
            source_box_id: rec.id.to_string(),
            repos,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            created: Utc::now(),
            cleaned: captured.cleaned,
            provider: captured.held.is_some().then(|| rec.provider.clone()),
            held: captured.held,
        };
        write_json(
            &manifest_path(self.home(), project.as_deref(), &name),
            &manifest,
        )?;
        if spec.set_default {
            set_default_locked(self.home(), project.as_deref(), Some(&name))?;
        }
        self.checkpoint_state(manifest)
    }

    fn checkpoint_state(&self, manifest: Manifest) -> Result<Checkpoint> {
        self.checkpoint_state_in(self.store()?, manifest)
    }

    fn checkpoint_state_in(
        &self,
        store: &agentbox_store::Store,
        manifest: Manifest,
    ) -> Result<Checkpoint> {
        let full_ref = ref_name(manifest.project.as_deref(), &manifest.name);
        let state = if store.get_ref(&full_ref)?.as_deref() != Some(manifest.node.as_str())
            || store.node(&manifest.node).is_err()
        {
            Freshness::NodeMissing
        } else if manifest.held.is_some() {
            // Its image holds its whole tree, base included: nothing on this host to
            // compare (an image removed behind agentbox's back is said so by the engine
            // when a box is made from it).
            Freshness::Fresh
        } else {
            match fingerprint(self.home(), manifest.base.image.as_deref()) {
                None => Freshness::BaseMissing,
                Some(f) if f == manifest.base.fingerprint => Freshness::Fresh,
                Some(_) => Freshness::Stale,
            }
        };
        let default = default_of(self.home(), manifest.project.as_deref())?.as_deref()
            == Some(manifest.name.as_str());
        Ok(Checkpoint {
            manifest,
            state,
            default,
        })
    }

    /// The checkpoints of `project` (`None` with `all`: of every project), by project and
    /// creation time.
    pub fn checkpoints(&self, project: Option<&Path>, all: bool) -> Result<Vec<Checkpoint>> {
        let mut out = Vec::new();
        for (_, m) in manifests(self.home(), (!all).then_some(project))? {
            out.push(self.checkpoint_state(m)?);
        }
        out.sort_by(|a, b| {
            (&a.manifest.project, a.manifest.created)
                .cmp(&(&b.manifest.project, b.manifest.created))
        });
        Ok(out)
    }

    /// Checkpoint `name` of `project`.
    pub fn checkpoint(&self, project: Option<&Path>, name: &str) -> Result<Checkpoint> {
        let m = read_json_opt::<Manifest>(&manifest_path(self.home(), project, name))?.ok_or_else(
            || BoxError::NoSuchCheckpoint {
                name: name.to_owned(),
                project: project.map(Path::to_owned),
            },
        )?;
        self.checkpoint_state(m)
    }

    /// Checkpoint `name` as the caller names it: of `project`; outside a project (`None`),
    /// the one of that name in any project, when only one has it.
    pub fn find_checkpoint(&self, project: Option<&Path>, name: &str) -> Result<Checkpoint> {
        if project.is_some() {
            return self.checkpoint(project, name);
        }
        let mut found: Vec<Checkpoint> = self
            .checkpoints(None, true)?
            .into_iter()
            .filter(|c| c.manifest.name == name)
            .collect();
        match found.len() {
            0 => Err(BoxError::NoSuchCheckpoint {
                name: name.to_owned(),
                project: None,
            }),
            1 => Ok(found.remove(0)),
            _ => Err(BoxError::Ambiguous {
                reference: name.to_owned(),
                candidates: found
                    .iter()
                    .map(|c| {
                        c.manifest
                            .project
                            .as_deref()
                            .map(|p| format!("{name} of {}", p.display()))
                            .unwrap_or_else(|| format!("{name} (no project)"))
                    })
                    .collect(),
            }),
        }
    }

    /// Remove checkpoint `name` of `project`: its ref (GC then frees the data no one else
    /// uses) and manifest; no longer the default if it was.
    pub fn checkpoint_remove(&self, project: Option<&Path>, name: &str) -> Result<Manifest> {
        let found = self.find_checkpoint(project, name)?;
        let project = found.manifest.project.as_deref();
        let _lock = lock(self.home(), project)?;
        if let Some(held) = &found.manifest.held {
            // The image's name first: an engine that does not answer leaves the
            // checkpoint whole, to remove again. Its data goes with the last of its users
            // (GC then releases the node's image to `prune`).
            let kind = found.manifest.provider_kind();
            let provider = self
                .provider_named(kind)
                .ok_or_else(|| BoxError::OtherProvider {
                    name: found.manifest.source_box.clone(),
                    provider: kind.to_owned(),
                })?;
            provider.remove_checkpoint_tree(project, held)?;
        }
        self.store()?.set_ref(&ref_name(project, name), None)?;
        fs_err::remove_file(manifest_path(self.home(), project, name))?;
        if found.default {
            set_default_locked(self.home(), project, None)?;
        }
        Ok(found.manifest)
    }

    /// Make checkpoint `name` the project's default (`None`: no default).
    /// Outside a project, a named checkpoint becomes the default of its own project.
    pub fn checkpoint_set_default(&self, project: Option<&Path>, name: Option<&str>) -> Result<()> {
        let project = match name {
            Some(n) => self.find_checkpoint(project, n)?.manifest.project,
            None => project.map(Path::to_owned),
        };
        let _lock = lock(self.home(), project.as_deref())?;
        set_default_locked(self.home(), project.as_deref(), name)
    }
}

impl Boxes {
    /// Checkpoints that can no longer be used — their node or base image is gone, or a
    /// manifest lost its ref — and refs under `checkpoints/` without a manifest; unless
    /// `dry_run`, each is removed (ref, manifest, the project's default naming it).
    pub(crate) fn prune_checkpoints(
        &self,
        store: &agentbox_store::Store,
        dry_run: bool,
    ) -> Result<Vec<crate::types::BoxLeftover>> {
        use crate::types::{BoxLeftover, PruneOutcome};
        let mut out = Vec::new();
        let mut known = std::collections::BTreeSet::new();
        for (path, m) in manifests(self.home(), None)? {
            let full_ref = ref_name(m.project.as_deref(), &m.name);
            known.insert(full_ref.clone());
            let c = self.checkpoint_state_in(store, m)?;
            let why = match c.state {
                Freshness::NodeMissing => "its node is gone",
                Freshness::BaseMissing => "its base image is gone",
                Freshness::Fresh | Freshness::Stale => continue,
            };
            let outcome = if dry_run {
                PruneOutcome::WouldRemove
            } else {
                let project = c.manifest.project.as_deref();
                let removed = (|| -> Result<()> {
                    let _lock = lock(self.home(), project)?;
                    store.set_ref(&full_ref, None)?;
                    fs_err::remove_file(&path)?;
                    if c.default {
                        set_default_locked(self.home(), project, None)?;
                    }
                    Ok(())
                })();
                match removed {
                    Ok(()) => PruneOutcome::Removed,
                    Err(e) => PruneOutcome::Kept(e.to_string()),
                }
            };
            out.push(BoxLeftover {
                kind: "checkpoint".into(),
                what: format!("checkpoint {:?} ({why})", c.manifest.name),
                target: path.display().to_string(),
                outcome,
            });
        }
        for (full_ref, _) in store.refs()? {
            if !full_ref.starts_with("checkpoints/") || known.contains(&full_ref) {
                continue;
            }
            let outcome = if dry_run {
                PruneOutcome::WouldRemove
            } else {
                match store.set_ref(&full_ref, None) {
                    Ok(()) => PruneOutcome::Removed,
                    Err(e) => PruneOutcome::Kept(e.to_string()),
                }
            };
            out.push(BoxLeftover {
                kind: "checkpoint-ref".into(),
                what: "a checkpoint ref without a manifest".into(),
                target: full_ref,
                outcome,
            });
        }
        Ok(out)
    }
}

/// The manifests (and their files) of `only`'s checkpoints (`Some(None)`: of boxes without
/// a project), or of every project's (`None`).
pub(crate) fn manifests(
    home: &Home,
    only: Option<Option<&Path>>,
) -> Result<Vec<(PathBuf, Manifest)>> {
    let dirs: Vec<PathBuf> = match only {
        Some(project) => vec![dir(home, project)],
        None => match fs_err::read_dir(home.root().join("projects")) {
            Ok(rd) => rd.flatten().map(|e| e.path().join("checkpoints")).collect(),
            Err(_) => Vec::new(),
        },
    };
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = fs_err::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json")
                && p.file_name().is_some_and(|n| n != "counters.json")
            {
                if let Some(m) = read_json_opt::<Manifest>(&p)? {
                    out.push((p, m));
                }
            }
        }
    }
    Ok(out)
}

/// The project's default checkpoint (`box.defaultCheckpoint` as configured for it).
pub fn default_of(home: &Home, project: Option<&Path>) -> Result<Option<String>> {
    Ok(crate::config::Config::load(home, project)
        .map_err(|e| BoxError::Config(Box::new(e)))?
        .effective()
        .default_checkpoint)
}

/// Set (or clear) `box.defaultCheckpoint` in the project's own configuration (the home's
/// global one for boxes without a project).
fn set_default_locked(home: &Home, project: Option<&Path>, name: Option<&str>) -> Result<()> {
    use crate::config::layers::{layer_path, set_in, unset_in, Layer};
    let layer = if project.is_some() {
        Layer::Project
    } else {
        Layer::Global
    };
    let path = layer_path(home, project, layer).expect("the project and global layers have files");
    let key = "box.defaultCheckpoint";
    match name {
        Some(n) => set_in(&path, key, &crate::config::key::Value::Str(n.to_owned())),
        None => unset_in(&path, key).map(|_| ()),
    }
    .map_err(|e| BoxError::Config(Box::new(e)))
}

/// Whether checkpoint `name` of `project` exists, or its ref or manifest does (a damaged
/// one still holds its name).
fn taken(
    home: &Home,
    store: &agentbox_store::Store,
    project: Option<&Path>,
    name: &str,
) -> Result<bool> {
    Ok(store.get_ref(&ref_name(project, name))?.is_some()
        || manifest_path(home, project, name).exists())
}

/// The next default name of a checkpoint of box `box_name`: `<box>-<n>`, `n` one more than
/// the last one given to that box name in the project (never reused, even after `rm`), and
/// past any name already taken — one that another box chose by hand cannot make the next
/// default capture fail.
fn next_name(
    home: &Home,
    store: &agentbox_store::Store,
    project: Option<&Path>,
    box_name: &str,
) -> Result<String> {
    let path = dir(home, project).join("counters.json");
    let mut counters: BTreeMap<String, u64> = read_json_opt(&path)?.unwrap_or_default();
    let n = counters.entry(box_name.to_owned()).or_insert(0);
    let name = loop {
        *n += 1;
        let name = format!("{box_name}-{n}");
        if !taken(home, store, project, &name)? {
            break name;
        }
    };
    write_json(&path, &counters)?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn names_of_the_projects_own_files_are_refused() {
        validate_name("golden").expect("a name");
        for bad in ["counters", "HEAD", "../x", "a/b", "abcd"] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
