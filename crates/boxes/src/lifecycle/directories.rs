//! The façade's operations on versioned directories and on the store as a whole: version a
//! directory (`agentbox env`), list environments with what each is, mount and unmount,
//! remove a directory's environment, move environments as bundles, check the store and
//! set up a btrfs store.

use std::path::{Path, PathBuf};

use agentbox_store::gc::FsckReport;
use agentbox_store::setup::SetupReport;
use agentbox_store::transfer::{ExportReport, ImportOptions, ImportReport};
use agentbox_store::{BackendKind, EnvState, Source, Store};
use serde::Serialize;

use crate::facade::Boxes;
use crate::lifecycle::ops::BoxState;
use crate::progress::Progress;
use crate::records::record::BoxRecord;
use crate::{BoxError, Result};

/// What `agentbox env DIR` is asked for.
#[derive(Debug, Clone)]
pub struct VersionDir {
    /// The directory to version (made when it does not exist and `from` is not a directory).
    pub dir: PathBuf,
    /// The environment's name (`None`: from the directory's name).
    pub name: Option<String>,
    /// The first node's content: a directory, or a rootfs tarball (path or URL). `None`:
    /// the directory's own content.
    pub from: Option<String>,
    pub message: Option<String>,
    /// The backend of a store made for it (an existing store keeps its own).
    pub backend: Option<BackendKind>,
}

/// A versioned directory just made.
#[derive(Debug, Serialize)]
pub struct Versioned {
    pub env: EnvState,
    pub backend: BackendKind,
    pub store: PathBuf,
}

/// What an environment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvKind {
    Box,
    Directory,
}

/// A listed environment's state: a box runs or not, a directory is mounted or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ListedState {
    Running,
    Stopped,
    Mounted,
    Unmounted,
}

impl ListedState {
    pub fn as_str(self) -> &'static str {
        match self {
            ListedState::Running => BoxState::Running.as_str(),
            ListedState::Stopped => BoxState::Stopped.as_str(),
            ListedState::Mounted => "mounted",
            ListedState::Unmounted => "unmounted",
        }
    }
}

/// One row of `list`: an environment, and whether it is a box or a versioned directory.
#[derive(Debug, Serialize)]
pub struct Listed {
    #[serde(flatten)]
    pub env: EnvState,
    pub kind: EnvKind,
    pub state: ListedState,
    /// Boxes: the directory the workspace was copied from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    /// Boxes: the box's record (id, number, display name, project, branches…).
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    pub record: Option<BoxRecord>,
}

/// What `prune` found and did.
#[derive(Debug, Serialize)]
pub struct Pruned {
    pub boxes: Vec<crate::types::BoxLeftover>,
    pub store: agentbox_store::leftovers::PruneReport,
}

impl Boxes {
    /// Version directory `v.dir` as a new environment, its first node its content (or
    /// `v.from`'s). The store is made when there is none.
    pub fn version_dir(&self, v: &VersionDir, progress: &dyn Progress) -> Result<Versioned> {
        let from_dir_name = v.name.is_none();
        let name = match &v.name {
            Some(n) => n.clone(),
            None => agentbox_store::names::from_dir_name(&dir_name(&v.dir)?),
        };
        let store = self.store_or_init(v.backend)?;
        store.check_new_env_name(&name).map_err(|e| match e {
            agentbox_store::Error::InvalidName { name, reason } if from_dir_name => {
                BoxError::NameFromDir { name, reason }
            }
            e => e.into(),
        })?;
        let dir = std::path::absolute(&v.dir).map_err(|e| BoxError::io(&v.dir, e))?;
        // Held until the environment exists: see `Store::hold`.
        let _staging = store.hold("create an environment")?;
        let (source, message) = match &v.from {
            None if dir.exists() => (
                Source::Dir(dir.clone()),
                v.message
                    .clone()
                    .unwrap_or_else(|| format!("content of {}", dir.display())),
            ),
            None => (
                Source::Empty,
                v.message.clone().unwrap_or_else(|| "empty".into()),
            ),
            Some(src) => {
                let p = Path::new(src);
                let msg = v.message.clone().unwrap_or_else(|| format!("from {src}"));
                if p.is_dir() {
                    (Source::Dir(p.to_owned()), msg)
                } else {
                    let mut staged = None;
                    progress.busy("fetching and unpacking the rootfs", &mut || {
                        staged = Some(agentbox_store::transfer::stage_rootfs(store, src)?);
                        Ok(())
                    })?;
                    (
                        Source::Staged(staged.expect("busy ran the work, which set it")),
                        msg,
                    )
                }
            }
        };
        progress.note(&format!(
            "Creating environment {name:?} at {} ({} backend)…",
            dir.display(),
            store.config().backend
        ));
        let mut made = None;
        let mut source = Some(source);
        progress.busy("copying the tree into the first node", &mut || {
            let source = source.take().expect("busy runs the work once");
            made = Some(store.create_env(&name, Some(&dir), source, &message)?);
            Ok(())
        })?;
        Ok(Versioned {
            env: made.expect("busy ran the work, which set it"),
            backend: store.config().backend,
            store: store.root().to_owned(),
        })
    }

    /// The environments of the home with what each is. `project`: only that project's
    /// boxes (no directories); `None`: every box and every directory. Boxes come first, by
    /// project and number; directories after them, by name.
    pub fn list(&self, project: Option<&Path>) -> Result<Vec<Listed>> {
        let records: std::collections::BTreeMap<String, BoxRecord> =
            crate::records::record::list(self.home())?
                .into_iter()
                .map(|r| (r.name.to_string(), r))
                .collect();
        let mut rows = Vec::new();
        for mut env in self.envs()? {
            // The store's own bookkeeping of what a box's layers sit on (the host's hidden
            // paths included): not part of a listing.
            env.box_base = None;
            match &env.mountpoint {
                Some(m) if project.is_none() => rows.push(Listed {
                    state: if agentbox_store::mounts::is_mountpoint(m) {
                        ListedState::Mounted
                    } else {
                        ListedState::Unmounted
                    },
                    kind: EnvKind::Directory,
                    source: None,
                    record: None,
                    env,
                }),
                Some(_) => {}
                None => {
                    let record = records.get(&env.name).cloned();
                    if project.is_some()
                        && record.as_ref().and_then(|r| r.project.as_deref()) != project
                    {
                        continue;
                    }
                    rows.push(Listed {
                        // Its own provider's answer (a Docker box's is its container's).
                        state: if self
                            .provider_of(&env.name)
                            .and_then(|p| p.is_running(&env.name))
                            .unwrap_or(false)
                        {
                            ListedState::Running
                        } else {
                            ListedState::Stopped
                        },
                        kind: EnvKind::Box,
                        source: record.as_ref().and_then(|r| r.source.clone()),
                        record,
                        env,
                    })
                }
            }
        }
        rows.sort_by(|a, b| {
            let key = |r: &Listed| {
                (
                    r.record.is_none(),
                    r.record.as_ref().and_then(|x| x.project.clone()),
                    r.record.as_ref().map(|x| x.index),
                    r.env.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        Ok(rows)
    }

    /// Mount (`mount`) or unmount a versioned directory's working tree.
    pub fn mount(&self, env: &str, mount: bool) -> Result<EnvState> {
        let store = self.store()?;
        Ok(if mount {
            store.mount_env(env)?
        } else {
            store.unmount_env(env)?
        })
    }

    /// Whether `name` is a versioned directory (not a box).
    pub fn is_directory(&self, name: &str) -> bool {
        self.store()
            .and_then(|s| Ok(s.env(name)?))
            .is_ok_and(|e| e.mountpoint.is_some())
    }

    /// Remove versioned directory `env`: unmounted, its environment gone (its data stays
    /// until `gc`). Returns the environment as it was.
    pub fn remove_directory(&self, env: &str) -> Result<EnvState> {
        let store = self.store()?;
        let state = store.env(env)?;
        store.remove_env(env)?;
        Ok(state)
    }

    /// Write a bundle of `env` (see [`agentbox_store::transfer::export`]).
    pub fn export(
        &self,
        env: &str,
        reference: &str,
        kind: agentbox_store::bundle::BundleKind,
        compression: agentbox_store::bundle::Compression,
        output: &Path,
    ) -> Result<ExportReport> {
        Ok(agentbox_store::transfer::export(
            self.store()?,
            env,
            reference,
            kind,
            compression,
            output,
        )?)
    }

    /// Make environment `name` at `dir` from a bundle or rootfs tarball (the store is made
    /// when there is none).
    pub fn import(
        &self,
        source: &str,
        name: &str,
        dir: &Path,
        options: ImportOptions,
    ) -> Result<ImportReport> {
        Ok(agentbox_store::transfer::import(
            self.store_or_init(None)?,
            source,
            name,
            dir,
            options,
        )?)
    }

    /// Import a rootfs tarball (file, URL or `-`) as image `name` (see
    /// [`crate::records::images::import`]). Needs root: an image's files keep their owners.
    /// Build a box image from `dockerfile` with the provider of kind `kind` (`docker`),
    /// on `engine` (its default when `None`); the image's fingerprint-tagged name.
    pub fn build_image(
        &self,
        kind: &str,
        dockerfile: &std::path::Path,
        engine: Option<&str>,
        progress: &dyn crate::progress::Progress,
    ) -> Result<String> {
        let provider = self
            .provider_named(kind)
            .ok_or_else(|| crate::BoxError::BadSetting {
                key: "--provider".into(),
                given: kind.to_owned(),
                reason: format!(
                    "this agentbox runs boxes with: {}",
                    self.providers()
                        .map(|p| p.kind())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        provider.build_image(dockerfile, engine, progress)
    }

    pub fn import_image(
        &self,
        name: &str,
        source: &str,
        progress: &dyn Progress,
    ) -> Result<crate::records::images::Image> {
        if !rustix::process::geteuid().is_root() {
            return Err(BoxError::NeedsRoot {
                operation: "importing an image".into(),
                reason: "an image's files keep their owners, which only root can set".into(),
            });
        }
        let store = self.store_or_init(None)?;
        let mut img = None;
        progress.busy("unpacking the image", &mut || {
            img = Some(crate::records::images::import(
                self.home(),
                store,
                name,
                source,
            )?);
            Ok(())
        })?;
        Ok(img.expect("busy ran the work, which set it"))
    }

    /// The imported images.
    pub fn images(&self) -> Result<Vec<crate::records::images::Image>> {
        crate::records::images::list(self.home())
    }

    /// Remove image `name`; refused while a box uses it.
    pub fn remove_image(&self, name: &str) -> Result<()> {
        crate::records::images::remove(self.home(), self.store()?, name)
    }

    /// Check the store as a crash left it (`repair`: fix what can be fixed).
    pub fn fsck(&self, repair: bool) -> Result<FsckReport> {
        Ok(self.store_unreconciled()?.fsck(repair)?)
    }

    /// The store's figures, and environment `env`'s when given (with `usage`, what its
    /// history and data add up to: a walk of both).
    pub fn store_status(
        &self,
        env: Option<&str>,
        usage: bool,
    ) -> Result<agentbox_store::history::Status> {
        Ok(self.store()?.status(env, usage)?)
    }

    /// Make a btrfs filesystem of `size` bytes in image file `image`, mount it where the
    /// home's store lives and make the store there. Refused when a store exists.
    pub fn setup_btrfs(&self, image: &Path, size: u64) -> Result<SetupReport> {
        let mountpoint = self.home().store_dir();
        if mountpoint.join("store.json").exists() {
            return Err(BoxError::StoreExists { dir: mountpoint });
        }
        let report = agentbox_store::setup::setup_loop_btrfs(image, size, &mountpoint)?;
        Store::init(&mountpoint, Some(BackendKind::Btrfs))?;
        Ok(report)
    }
}

/// The last component of `dir` made absolute (what an environment is named after).
pub fn dir_name(dir: &Path) -> Result<String> {
    let abs = std::path::absolute(dir).map_err(|e| BoxError::io(dir, e))?;
    abs.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| BoxError::NoDirName {
            dir: dir.to_owned(),
        })
}
