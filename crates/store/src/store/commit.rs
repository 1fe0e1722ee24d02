//! Commit (the protocol in the [`crate::store`] docs: layer → record → node → `env.json`)
//! and checkout.

use super::*;

impl Store {
    /// Paths changed in `env`'s working tree since its last commit or checkout (relative,
    /// with whether each is a directory).
    pub fn changed_paths(&self, env: &str) -> Result<Vec<(PathBuf, bool)>> {
        self.changed_paths_hinted(env, None)
    }

    /// [`Store::changed_paths`] looking only at the paths of `hint` (and what they imply),
    /// when the hint was made against the marks the last commit left
    /// ([`Store::marks_version`]); otherwise at the whole working layer. The caller vouches
    /// that no other path changed since those marks (a box's supervisor knows it from its
    /// watcher of the layer).
    pub fn changed_paths_hinted(
        &self,
        env: &str,
        hint: Option<&crate::backend::ChangeHint>,
    ) -> Result<Vec<(PathBuf, bool)>> {
        let state = self.env(env)?;
        self.backend.changed_paths(&self.work_dirs(&state), hint)
    }

    /// The version of the marks `env`'s next change check compares with: a hint made
    /// against it is used while no commit or reset came in between.
    pub fn marks_version(&self, env: &str) -> Result<Option<crate::backend::MarksVersion>> {
        let state = self.env(env)?;
        self.backend.marks_version(&self.work_dirs(&state))
    }

    /// A read-only view of `env`'s working tree on the host (for a box, its layer: HEAD's
    /// chain with the working changes over it), mounted while the view lives.
    pub fn working_view(&self, env: &str) -> Result<crate::backend::WorkingView> {
        let state = self.env(env)?;
        let head = self.node(&state.head)?;
        self.backend
            .working_view(&self.work_dirs(&state), &self.chain(&head)?)
    }

    /// Record `base` as the tree box `env`'s layers are mounted over ([`EnvState::box_base`]),
    /// when it is not recorded already. Called by the box's runtime before it mounts them.
    pub fn record_box_base(&self, env: &str, base: &crate::backend::BoxBase) -> Result<()> {
        if self.env(env)?.box_base.as_ref() == Some(base) {
            return Ok(());
        }
        let _g = self.lock_env(env, "record the box's base")?;
        let mut state = self.env(env)?;
        state.box_base = Some(base.clone());
        self.write_env(&state)
    }

    /// The overlay layers a box runs on (HEAD's chain and the working directories).
    pub fn box_layers(&self, env: &str) -> Result<crate::backend::BoxLayers> {
        let state = self.env(env)?;
        let head = self.node(&state.head)?;
        self.backend
            .box_layers(&self.work_dirs(&state), &self.chain(&head)?)
    }

    /// Start prestaging box `env`'s files (see [`crate::backend::prestage`]): an empty area
    /// for copies of its upper directory's files, held (with the store lock, shared) until
    /// the returned value is offered to a commit or dropped.
    pub fn prestage(&self, env: &str) -> Result<crate::backend::prestage::Prestage> {
        let lock = self.hold("prestage a box's files")?;
        let state = self.env(env)?;
        let dirs = self.work_dirs(&state);
        if dirs.mountpoint.is_some() {
            return Err(Error::Backend {
                path: dirs.work.clone(),
                message: "only a box's files are prestaged".into(),
            });
        }
        let head = self.node(&state.head)?;
        let chain = self.chain(&head)?;
        let nonce = agentbox_core::id::new_id();
        let area = self.backend.prestage_area(&chain, &nonce)?;
        Ok(crate::backend::prestage::Prestage::new(
            crate::backend::layers::LayersBackend::upper(&dirs),
            area,
            lock,
            &nonce,
        ))
    }

    /// Freeze the working tree of `env` as a child of HEAD and move HEAD to it.
    pub fn commit(&self, env: &str, opts: CommitOpts) -> Result<Node> {
        self.commit_with(env, opts, false)
    }

    /// [`Store::commit`] of box `env` while its supervisor holds it stopped: no process of
    /// the box is left and none starts before this returns, so its overlay is mounted
    /// nowhere and nothing writes to its upper directory. The `layers` backend then hands
    /// the upper directory to the new layer by a rename instead of copying what changed
    /// (see [`crate::backend::WorkDirs::box_stopped`]); the box must be started again on
    /// the new HEAD (its layers from [`Store::box_layers`]) after this returns, whether it
    /// succeeded or not.
    pub fn commit_stopped_box(&self, env: &str, opts: CommitOpts) -> Result<Node> {
        self.commit_with(env, opts, true)
    }

    fn commit_with(&self, env: &str, opts: CommitOpts, box_stopped: bool) -> Result<Node> {
        let mut timer = agentbox_core::timing::Timer::start("commit");
        let mut guard = self.lock_env_unsettled(env, "commit")?;
        let mut state = self.env(env)?;
        let head = self.node(&state.head)?;
        let chain = self.chain(&head)?;
        let id = NodeId::new();
        timer.lap("prepare");
        let dirs = WorkDirs {
            box_stopped: box_stopped && state.mountpoint.is_none(),
            ..self.work_dirs(&state)
        };
        if let Some(record) = self.backend.record_ahead(&dirs, &chain, &id) {
            return self.commit_ahead(
                &mut guard, state, &head, &chain, &dirs, &id, &record, opts, &mut timer,
            );
        }
        guard.settle()?;
        let record = self.backend.commit(&dirs, &chain, &id)?;
        timer.lap("backend");
        let node = match self.commit_point(&mut state, &head, &id, &record, opts, &mut timer) {
            Ok(node) => node,
            Err(e) => {
                // Unless HEAD moved after all (an error after the rename of env.json), the
                // working tree gets back what the backend took for the layer, which no HEAD
                // names (garbage for GC). The commit's own error is what to report.
                let passed = self.env(env).is_ok_and(|s| s.head == id);
                if !passed && self.backend.abandon(&dirs, &id).is_ok() && dirs.mountpoint.is_some()
                {
                    let _ = self.backend.mount(&dirs, &chain);
                }
                return Err(e);
            }
        };
        failpoint::hit("commit:after-head");
        self.backend.committed(&dirs, &record)?;
        timer.lap("head");
        Ok(node)
    }

    /// The store's half of a commit, after the backend made layer `record`: its record,
    /// the node and its index entry made durable, then HEAD moved (the commit point).
    pub(super) fn commit_point(
        &self,
        state: &mut EnvState,
        head: &Node,
        id: &NodeId,
        record: &LayerRecord,
        opts: CommitOpts,
        timer: &mut agentbox_core::timing::Timer,
    ) -> Result<Node> {
        failpoint::hit("commit:after-layer");
        let (node, durable) = self.stage_node(state, head, id, record, opts)?;
        timer.lap("metadata");
        self.backend.make_durable(&durable)?;
        timer.lap("durable");
        failpoint::hit("commit:after-node");
        self.move_head(state, head, &node)?;
        Ok(node)
    }

    /// A commit whose backend makes its layer durable by a step that also makes every
    /// file written before it durable (a btrfs snapshot commits the filesystem's
    /// transaction; see [`Backend::record_ahead`]): the layer's record, the node and its
    /// index entry are written first, their data written out without a device flush, and
    /// the layer's creation makes them durable with it — one flush fewer per commit. A crash
    /// before HEAD moves leaves an unacknowledged node (and perhaps a record without its
    /// layer), which recovery removes as it does for the other order. The same step makes
    /// the store marker durable, so it costs no flush of its own either (`guard` is still
    /// unsettled: nothing was made durable since the marker was created).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit_ahead(
        &self,
        guard: &mut EnvGuard,
        mut state: EnvState,
        head: &Node,
        chain: &[LayerRecord],
        dirs: &WorkDirs,
        id: &NodeId,
        record: &LayerRecord,
        opts: CommitOpts,
        timer: &mut agentbox_core::timing::Timer,
    ) -> Result<Node> {
        let (node, staged) = self.stage_node(&state, head, id, record, opts)?;
        timer.lap("metadata");
        let made = backend::write_out(&staged).and_then(|()| self.backend.commit(dirs, chain, id));
        if let Err(e) = made {
            // Nothing names the staged files yet: they go, and the commit's error is the
            // one to report.
            for f in &staged {
                let _ = fs_err::remove_file(f);
            }
            return Err(e);
        }
        guard.carried();
        timer.lap("backend");
        failpoint::hit("commit:after-layer");
        self.move_head(&mut state, head, &node)?;
        failpoint::hit("commit:after-head");
        self.backend.committed(dirs, record)?;
        timer.lap("head");
        Ok(node)
    }

    /// Write layer `record`'s record, the index entry and the file of the node that names
    /// it as a child of `head` (none durable yet); returns the node and the files written.
    pub(super) fn stage_node(
        &self,
        state: &EnvState,
        head: &Node,
        id: &NodeId,
        record: &LayerRecord,
        opts: CommitOpts,
    ) -> Result<(Node, Vec<PathBuf>)> {
        write_json_unsynced(&self.layout.layer_record(id), record)?;
        failpoint::hit("commit:after-record");
        let node = Node {
            id: id.clone(),
            parent: Some(head.id.clone()),
            env: state.name.clone(),
            seq: state.next_seq,
            layer: id.as_str().to_owned(),
            message: opts.message,
            command: opts.command,
            created: Utc::now(),
            metadata: opts.metadata,
            deleted: None,
            detached: None,
        };
        // The id's index entry before the node file: a node is never without it.
        let entry = self.index_id(&node.id)?;
        failpoint::hit("commit:after-index");
        write_json_unsynced(&self.layout.node(&node.id), &node)?;
        let mut files = vec![
            self.layout.layer_record(&node.layer),
            self.layout.node(&node.id),
        ];
        files.extend(entry);
        Ok((node, files))
    }

    /// The commit point: HEAD, the tips and the next sequence number move together.
    pub(crate) fn move_head(&self, state: &mut EnvState, head: &Node, node: &Node) -> Result<()> {
        state.tips.remove(head.id.as_str());
        state.tips.insert(node.id.as_str().to_owned());
        state.head = node.id.clone();
        state.next_seq += 1;
        self.write_env(state)
    }

    /// Make `env`'s working tree hold the tree of `reference` and move HEAD there. Resolution
    /// and action happen under the environment's lock, so the ref cannot move in between.
    pub fn checkout(&self, env: &str, reference: &str) -> Result<Node> {
        let _g = self.lock_env(env, "checkout")?;
        let state = self.env(env)?;
        let node = self.node(&self.resolve_in(&state, reference)?)?;
        self.finish_checkout(state, &node)?;
        Ok(node)
    }
}
