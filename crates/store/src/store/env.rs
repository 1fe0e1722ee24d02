//! Environments: creating, forking, removing, mounting; their disk limits and usage, their
//! working changes and the box views of their layers.

use super::*;

impl Store {
    pub fn env(&self, name: &str) -> Result<EnvState> {
        read_json_opt(&self.layout.env_state(name))?.ok_or_else(|| Error::UnknownEnv {
            name: name.to_owned(),
        })
    }

    pub fn envs(&self) -> Result<Vec<EnvState>> {
        let mut out = Vec::new();
        for entry in fs_err::read_dir(self.layout.envs())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(state) = read_json_opt::<EnvState>(&self.layout.env_state(&name))? {
                out.push(state);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The environment whose mount point contains `path`, if any.
    pub fn env_for_path(&self, path: &Path) -> Result<Option<EnvState>> {
        let path = fs_err::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        Ok(self
            .envs()?
            .into_iter()
            .filter(|e| e.mountpoint.as_ref().is_some_and(|m| path.starts_with(m)))
            .max_by_key(|e| e.mountpoint.as_ref().map_or(0, |m| m.as_os_str().len())))
    }

    /// Claim environment name `name` by creating its directory: exactly one creator wins,
    /// the others get [`Error::EnvExists`].
    pub(crate) fn claim_env_dir(&self, name: &str) -> Result<PathBuf> {
        let env_dir = self.layout.env_dir(name);
        fs_err::create_dir_all(self.layout.envs())?;
        match std::fs::create_dir(&env_dir) {
            Ok(()) => Ok(env_dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::EnvExists { name: name.into() })
            }
            Err(e) => Err(Error::Io(io_at(&env_dir, e))),
        }
    }

    pub(crate) fn write_env(&self, state: &EnvState) -> Result<()> {
        // The commit point of every commit and checkout: one journal commit where the
        // filesystem allows (see `backend::write_json_durable`).
        backend::write_json_durable(&self.layout.env_state(&state.name), state)
    }

    pub(crate) fn work_dirs(&self, state: &EnvState) -> WorkDirs {
        WorkDirs {
            base: state.box_base.clone(),
            ..self
                .layout
                .work_dirs(&state.name, state.mountpoint.as_deref())
        }
    }

    /// Check the name of a new environment: valid (see [`names::validate_env`]) and, when
    /// all hex, not a prefix of an existing node's id.
    pub fn check_new_env_name(&self, name: &str) -> Result<()> {
        names::validate_env("environment", name)?;
        self.check_not_id_prefix("environment", name)?;
        Ok(())
    }

    /// Create environment `name` whose working tree is mounted at `mountpoint` (none for a
    /// box), with a first node holding `source`.
    pub fn create_env(
        &self,
        name: &str,
        mountpoint: Option<&Path>,
        source: Source,
        message: &str,
    ) -> Result<EnvState> {
        self.check_new_env_name(name)?;
        let _store = self.lock_store(Mode::Shared, "create")?;
        let env_dir = self.claim_env_dir(name)?;
        let _lock = FileLock::acquire(
            &self.layout.env_lock(name),
            Mode::TryExclusive,
            &format!("environment {name:?}"),
            "create",
        )?;
        let result = self.create_env_locked(name, mountpoint, source, message);
        if result.is_err() {
            // Nothing half-made stays behind: the first node was never acknowledged.
            let dirs = self.layout.work_dirs(name, mountpoint);
            let _ = self.backend.unmount(&dirs);
            let _ = self.backend.remove_work(&dirs);
            let _ = fs_err::remove_dir_all(&env_dir);
        }
        result
    }

    pub(super) fn create_env_locked(
        &self,
        name: &str,
        mountpoint: Option<&Path>,
        source: Source,
        message: &str,
    ) -> Result<EnvState> {
        let mountpoint = self.claim_mountpoint(mountpoint)?;
        let layer_id = new_id();
        let record = match source {
            Source::Empty => self.backend.empty_layer(&layer_id)?,
            Source::Dir(dir) => self.backend.layer_from_dir(&dir, &layer_id)?,
            Source::Staged(dir) => self.backend.layer_from_staged(&dir, &layer_id)?,
        };
        write_json_unsynced(&self.layout.layer_record(&layer_id), &record)?;
        failpoint::hit("create:after-layer");
        let node = Node {
            id: NodeId::from_trusted(layer_id.as_str()),
            parent: None,
            env: name.to_owned(),
            seq: 0,
            layer: layer_id.clone(),
            message: message.to_owned(),
            command: None,
            created: Utc::now(),
            metadata: BTreeMap::new(),
            deleted: None,
            detached: None,
        };
        let entry = self.index_id(&node.id)?;
        write_json_unsynced(&self.layout.node(&node.id), &node)?;
        let mut durable = vec![
            self.layout.layer_record(&layer_id),
            self.layout.node(&node.id),
        ];
        durable.extend(entry);
        self.backend.make_durable(&durable)?;
        let state = EnvState {
            name: name.to_owned(),
            created: node.created,
            mountpoint,
            head: node.id.clone(),
            next_seq: 1,
            tips: BTreeSet::from([node.id.as_str().to_owned()]),
            tags: BTreeMap::new(),
            checkout_pending: None,
            box_base: None,
            disk_limit: None,
            held_by: None,
        };
        let dirs = self.work_dirs(&state);
        self.backend.reset_work(&dirs, &[record])?;
        self.write_env(&state)?;
        Ok(state)
    }

    /// Limit the disk a box's work area may use to `bytes` (see [`crate::disk`]): recorded
    /// in its state and applied now and after every checkout. Refused, with what the
    /// filesystem lacks, where it cannot be enforced; refused for an environment with a
    /// mount point (only boxes have one work area that is all theirs).
    pub fn set_disk_limit(&self, env: &str, bytes: u64) -> Result<crate::disk::DiskLimit> {
        crate::disk::check(self.backend.kind(), self.layout.root())?;
        let _g = self.lock_env(env, "limit the disk of")?;
        let mut state = self.env(env)?;
        if state.mountpoint.is_some() {
            return Err(Error::Refused {
                action: "limit the disk of",
                id: env.to_owned(),
                reason: "only a box's work area can be limited".to_owned(),
            });
        }
        let project = match self.backend.kind() {
            crate::BackendKind::Btrfs => 0,
            crate::BackendKind::Layers => {
                let taken: Vec<u32> = self
                    .envs()?
                    .iter()
                    .filter(|e| e.name != env)
                    .filter_map(|e| e.disk_limit.map(|l| l.project))
                    .collect();
                crate::disk::project_for(self.layout.root(), env, &taken)
            }
        };
        let limit = crate::disk::DiskLimit { bytes, project };
        crate::disk::apply(self.backend.kind(), &self.work_dirs(&state).work, &limit)?;
        state.disk_limit = Some(limit);
        self.write_env(&state)?;
        Ok(limit)
    }

    /// Whether disk limits can be set on this store (see [`Store::set_disk_limit`]); the
    /// error says what the filesystem lacks.
    pub fn check_disk_limit(&self) -> Result<()> {
        crate::disk::check(self.backend.kind(), self.layout.root())
    }

    /// The disk used by box `env`'s work area against its limit; `None` without a limit.
    pub fn disk_usage(&self, env: &str) -> Result<Option<crate::disk::DiskUsage>> {
        let state = self.env(env)?;
        let Some(limit) = &state.disk_limit else {
            return Ok(None);
        };
        let dirs = self.work_dirs(&state);
        crate::disk::usage(self.backend.kind(), &dirs.work, limit).map(Some)
    }

    /// Canonical form of a new environment's mount point, refused when another environment
    /// is mounted there.
    pub(super) fn claim_mountpoint(&self, mountpoint: Option<&Path>) -> Result<Option<PathBuf>> {
        let Some(mountpoint) = mountpoint else {
            return Ok(None);
        };
        fs_err::create_dir_all(mountpoint)?;
        let mountpoint = fs_err::canonicalize(mountpoint)?;
        if let Some(other) = self
            .envs()?
            .into_iter()
            .find(|e| e.mountpoint.as_ref() == Some(&mountpoint))
        {
            return Err(Error::Refused {
                action: "create an environment at",
                id: mountpoint.display().to_string(),
                reason: format!("environment {:?} is already mounted there", other.name),
            });
        }
        Ok(Some(mountpoint))
    }

    /// Fork: a new environment whose HEAD is an existing node (no data is copied).
    /// `reference` is resolved in `from_env` (see [`Store::resolve`]).
    pub fn fork_env(
        &self,
        from_env: &str,
        reference: &str,
        name: &str,
        mountpoint: Option<&Path>,
    ) -> Result<EnvState> {
        let _store = self.lock_store(Mode::Shared, "fork")?;
        let id = self.resolve(from_env, reference)?;
        self.fork_locked(&id, name, mountpoint)
    }

    /// Fork from any node of the store, named by a store ref, an id or an id prefix (see
    /// [`Store::resolve_node`]), whatever environment made it and whether or not that
    /// environment still exists: a checkpoint (`checkpoints/<project>/<name>`) or any other
    /// detached node. O(1) in the size of the tree (an overlay over the node's chain on
    /// `layers`, a writable snapshot on `btrfs`); the new environment's history starts at
    /// the node (with the node's ancestors, when it has any).
    pub fn fork_node(
        &self,
        reference: &str,
        name: &str,
        mountpoint: Option<&Path>,
    ) -> Result<EnvState> {
        let _store = self.lock_store(Mode::Shared, "fork")?;
        let id = self.resolve_node(reference)?;
        self.fork_locked(&id, name, mountpoint)
    }

    /// A new environment `name` whose HEAD is node `id` (store lock held shared, so the node
    /// cannot be deleted in between).
    pub(super) fn fork_locked(
        &self,
        id: &str,
        name: &str,
        mountpoint: Option<&Path>,
    ) -> Result<EnvState> {
        self.check_new_env_name(name)?;
        let node = self.node(id)?;
        let env_dir = self.claim_env_dir(name)?;
        let result = (|| {
            // A fork of a node a provider holds is held by it too: the provider makes its
            // tree (see `crate::held`); the store only starts its history.
            let held_by = self.held_of(&node)?.map(|h| h.by);
            if held_by.is_some() && mountpoint.is_some() {
                return Err(Error::Refused {
                    action: "mount",
                    id: node.id.as_str().to_owned(),
                    reason: "its tree is held by a provider, outside the store".to_owned(),
                });
            }
            let state = EnvState {
                name: name.to_owned(),
                created: Utc::now(),
                mountpoint: self.claim_mountpoint(mountpoint)?,
                head: node.id.clone(),
                next_seq: 1,
                // The fork's history is the node's ancestors until it commits.
                tips: BTreeSet::new(),
                tags: BTreeMap::new(),
                checkout_pending: None,
                box_base: None,
                disk_limit: None,
                held_by,
            };
            if state.held_by.is_none() {
                self.backend
                    .reset_work(&self.work_dirs(&state), &self.chain(&node)?)?;
            }
            self.write_env(&state)?;
            Ok(state)
        })();
        if result.is_err() {
            let _ = fs_err::remove_dir_all(&env_dir);
        }
        result
    }

    /// Remove an environment: unmount, drop its working area and state. Its nodes stay until
    /// GC finds them unreferenced. The working files are deleted before this returns (see
    /// [`Store::discard_env`] for a removal that does not wait for them).
    pub fn remove_env(&self, name: &str) -> Result<()> {
        if let Some(d) = self.discard_env(name)? {
            self.remove_discarded(d.entry())?;
        }
        Ok(())
    }

    /// Mount an environment's working tree again (after a reboot).
    pub fn mount_env(&self, name: &str) -> Result<EnvState> {
        let state = self.env(name)?;
        let _g = self.lock_env(name, "mount")?;
        let head = self.node(&state.head)?;
        let dirs = self.work_dirs(&state);
        self.backend.mount(&dirs, &self.chain(&head)?)?;
        // A box's work area lost in a crash is made anew by the mount: limit it again
        // (idempotent when it was there all along).
        if let Some(limit) = &state.disk_limit {
            crate::disk::apply(self.backend.kind(), &dirs.work, limit)?;
        }
        Ok(state)
    }

    pub fn unmount_env(&self, name: &str) -> Result<EnvState> {
        let state = self.env(name)?;
        let _g = self.lock_env(name, "unmount")?;
        self.backend.unmount(&self.work_dirs(&state))?;
        Ok(state)
    }
}
