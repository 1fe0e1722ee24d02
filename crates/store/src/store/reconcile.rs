//! Crash recovery: finishing or undoing what an interrupted operation left (unacknowledged
//! nodes, interrupted commits and handoffs, tombstones), and the detached nodes nothing names.

use super::*;

impl Store {
    /// Run [`Store::reconcile`] when it has something to do — an operation left its intent
    /// marker (see [`crate::inflight`]) or the store is still of format 1 — and no other
    /// process is using the store. The common case reads one small directory: opening
    /// costs the same whatever the number of nodes and environments.
    pub(super) fn reconcile_if_idle(&self) -> Result<()> {
        // Without the lock: a marker that appears after this look is a live operation's,
        // none of our business; one a dead operation left stays until someone acts on it.
        if self.index_ready() && inflight::left(&self.layout)?.is_empty() {
            return Ok(());
        }
        match FileLock::acquire(
            &self.layout.lock(),
            Mode::TryExclusive,
            "the store",
            "reconcile",
        ) {
            Ok(lock) => {
                let _lock = StoreLock::unmarked(lock);
                self.reconcile().map(|_| ())
            }
            Err(agentbox_core::Error::Locked { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Environments whose commit stopped before its commit point while the backend held
    /// part of the working tree under the new layer's name (see
    /// [`Backend::unfinished_commit`]): `(environment, layer)`. Caller holds the store lock
    /// exclusively.
    pub(crate) fn interrupted_commits(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for state in self.envs()?.into_iter().filter(|s| s.held_by.is_none()) {
            let Some(layer) = self.backend.unfinished_commit(&self.work_dirs(&state))? else {
                continue;
            };
            let acknowledged = state.head.as_str() == layer
                || self
                    .read_node_file(&layer)?
                    .is_some_and(|n| n.env == state.name && n.seq < state.next_seq);
            if !acknowledged {
                out.push((state.name.clone(), layer));
            }
        }
        Ok(out)
    }

    /// Give `env` back the working files its interrupted commit of `layer` held (see
    /// [`Store::interrupted_commits`]); the layer's record and listing go with its data.
    pub(crate) fn give_back_interrupted(&self, env: &str, layer: &str) -> Result<()> {
        let state = self.env(env)?;
        self.backend.abandon(&self.work_dirs(&state), layer)?;
        let record = self.layout.layer_record(layer);
        if record.exists() {
            fs_err::remove_file(&record)?;
        }
        crate::listing::remove(&self.layout.layers(), layer)
    }

    /// Finish or undo what an interrupted operation left (caller holds the store lock
    /// exclusively): complete tombstoned deletions, remove unacknowledged commits and
    /// temporary files. Returns a description of each repair.
    pub(crate) fn reconcile(&self) -> Result<Vec<String>> {
        // Markers of operations that are over (the caller's lock is exclusive); cleared
        // once the whole pass is done, so a pass that dies runs again.
        let markers = inflight::left(&self.layout)?;
        let mut repairs = Vec::new();
        for dir in [self.layout.nodes(), self.layout.layers(), self.layout.tmp()] {
            fs_err::create_dir_all(&dir)?;
        }
        // Temporary files of interrupted atomic writes and staging areas.
        for dir in [self.layout.nodes(), self.layout.layers()] {
            for entry in fs_err::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if atomic::is_tmp_name(&name) && entry.file_type()?.is_file() {
                    fs_err::remove_file(entry.path())?;
                    repairs.push(format!("removed temporary file {}", entry.path().display()));
                }
            }
        }
        // Working files an interrupted commit moved under its layer's name (a `layers`
        // handoff): given back before that layer, named by no HEAD, counts as unfinished.
        for (env, layer) in self.interrupted_commits()? {
            self.give_back_interrupted(&env, &layer)?;
            repairs.push(format!(
                "gave the working files of {env:?} back from its interrupted commit"
            ));
        }
        // Layer data without a record: a commit or import that never reached its record, or
        // a GC interrupted between removing the record and the data. Nobody else is writing
        // (the store lock is exclusive), so these are garbage.
        for entry in fs_err::read_dir(self.layout.layers())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let half_made = name.starts_with(".tmp-")
                || (id::is_full_id(&name) && !self.layout.layer_record(&name).exists());
            if half_made && entry.file_type()?.is_dir() {
                self.backend.remove_tree(&entry.path())?;
                repairs.push(format!(
                    "removed unfinished layer {}",
                    entry.path().display()
                ));
            }
            // The listing of such a layer (written before its record).
            if let Some(lid) = crate::listing::id_of(&name) {
                if id::is_full_id(lid) && !self.layout.layer_record(lid).exists() {
                    crate::listing::remove(&self.layout.layers(), lid)?;
                }
            }
        }
        for entry in fs_err::read_dir(self.layout.tmp())? {
            let entry = entry?;
            self.backend.remove_tree(&entry.path())?;
            repairs.push(format!("removed staging {}", entry.path().display()));
        }
        let files = self.all_node_files()?;
        for (id, node) in &files {
            if node.deleted.is_some() {
                self.finish_tombstone(id)?;
                repairs.push(format!("finished deleting node {id}"));
            }
        }
        // Unacknowledged commits: seq not below the environment's next_seq.
        let envs: BTreeMap<String, EnvState> = self
            .envs()?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        let files = self.all_node_files()?;
        let referenced: BTreeSet<&str> =
            files.values().filter_map(|n| n.parent.as_deref()).collect();
        for (id, node) in &files {
            if node.detached.is_some() {
                // No history, no sequence number. One no ref names (a derive or flatten
                // stopped before its ref, or the ref was removed since: the two look the
                // same) is not half-made data but garbage like any unreachable node: GC
                // frees it.
                continue;
            }
            let Some(env) = envs.get(&node.env) else {
                continue;
            };
            if node.seq >= env.next_seq && env.head != *id && !referenced.contains(id.as_str()) {
                self.remove_node_file(id)?;
                repairs.push(format!(
                    "removed node {id}: its commit to {:?} was interrupted",
                    node.env
                ));
            }
        }
        // Environments whose creation never completed have a directory but no env.json.
        for entry in fs_err::read_dir(self.layout.envs())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.layout.env_state(&name).exists() {
                // Held lock means the creation is still running in another process.
                if FileLock::acquire(
                    &self.layout.env_lock(&name),
                    Mode::TryExclusive,
                    "env",
                    "reconcile",
                )
                .is_ok()
                {
                    let work = self.layout.env_dir(&name).join("work");
                    if work.exists() {
                        self.backend.remove_tree(&work)?;
                    }
                    fs_err::remove_dir_all(entry.path())?;
                    repairs.push(format!("removed half-created environment {name:?}"));
                }
            }
        }
        repairs.extend(self.repair_index()?);
        inflight::clear(&markers)?;
        Ok(repairs)
    }
}

impl Store {
    /// Detached nodes (see [`crate::node`]) that nothing names: no store ref, no
    /// environment's HEAD, tag or pending checkout, no child (nor a deletion about to
    /// re-parent one onto it). `files` is every node file, tombstones included.
    pub(crate) fn unnamed_detached(
        &self,
        files: &BTreeMap<String, Node>,
        envs: &[EnvState],
    ) -> Result<BTreeSet<String>> {
        let mut named: BTreeSet<String> = self.refs()?.into_values().collect();
        for e in envs {
            named.insert(e.head.as_str().to_owned());
            named.extend(e.tags.values().cloned());
            named.extend(e.checkout_pending.as_deref().map(str::to_owned));
        }
        for n in files.values() {
            named.extend(n.parent.as_deref().map(str::to_owned));
            named.extend(
                n.deleted
                    .as_ref()
                    .and_then(|t| t.reparent_to.as_deref())
                    .map(str::to_owned),
            );
        }
        Ok(files
            .iter()
            .filter(|(id, n)| n.detached.is_some() && n.deleted.is_none() && !named.contains(*id))
            .map(|(id, _)| id.clone())
            .collect())
    }
}
