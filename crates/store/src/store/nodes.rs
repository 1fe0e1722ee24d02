//! Node files, layer records and chains: reading them, and deleting nodes (tombstones,
//! re-parenting children, dropping the refs that named them).

use super::*;

impl Store {
    /// Read one node file (tombstones included).
    pub(crate) fn read_node_file(&self, id: &str) -> Result<Option<Node>> {
        Ok(read_json_opt(&self.layout.node(id))?)
    }

    /// A live node by full id.
    pub fn node(&self, id: &str) -> Result<Node> {
        match self.read_node_file(id)? {
            Some(n) if n.deleted.is_none() => Ok(n),
            _ => Err(Error::UnknownRef {
                reference: id.into(),
            }),
        }
    }

    /// Every node file, tombstones included, keyed by id.
    pub(crate) fn all_node_files(&self) -> Result<BTreeMap<String, Node>> {
        let mut out = BTreeMap::new();
        for entry in fs_err::read_dir(self.layout.nodes())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if !id::is_full_id(id) {
                continue;
            }
            // A node deleted between read_dir and read is simply gone.
            if let Some(node) = self.read_node_file(id)? {
                out.insert(id.to_owned(), node);
            }
        }
        Ok(out)
    }

    /// Every live node, keyed by id, with parents resolved through pending tombstones.
    pub fn nodes(&self) -> Result<BTreeMap<String, Node>> {
        let files = self.all_node_files()?;
        let mut live: BTreeMap<String, Node> = files
            .iter()
            .filter(|(_, n)| n.deleted.is_none())
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        for node in live.values_mut() {
            let mut parent = node.parent.clone();
            // Follow tombstones a concurrent or interrupted deletion left.
            let mut hops = 0;
            while let Some(p) = parent.clone() {
                match files.get(p.as_str()) {
                    Some(n) if n.deleted.is_some() && hops < files.len() => {
                        parent = n.deleted.as_ref().and_then(|t| t.reparent_to.clone());
                        hops += 1;
                    }
                    _ => break,
                }
            }
            node.parent = parent;
        }
        Ok(live)
    }

    pub(crate) fn layer_record(&self, id: &str) -> Result<LayerRecord> {
        read_json_opt(&self.layout.layer_record(id))?.ok_or_else(|| Error::Corrupt {
            path: self.layout.layer_record(id),
            message: "layer record missing (run `agentbox fsck`)".into(),
        })
    }

    /// The chain of layers (top first) whose union is `node`'s tree. Every reading or
    /// making of a tree goes through here, so a node whose tree a provider holds (see
    /// `crate::held`) is refused here with [`Error::Held`].
    pub fn chain(&self, node: &Node) -> Result<Vec<LayerRecord>> {
        let mut chain = Vec::new();
        let mut next = Some(node.layer.clone());
        while let Some(id) = next {
            let rec = self.layer_record(&id)?;
            if let Some(held) = &rec.held {
                return Err(Error::Held {
                    node: node.id.as_str().to_owned(),
                    by: held.by.clone(),
                });
            }
            next = rec.parent.clone();
            chain.push(rec);
            if chain.len() > 4096 {
                return Err(Error::Corrupt {
                    path: self.layout.layer_record(&id),
                    message: "layer chain loops".into(),
                });
            }
        }
        Ok(chain)
    }

    /// Directories of a node's chain, top first (what an overlay stacks).
    pub fn chain_dirs(&self, node: &Node) -> Result<Vec<PathBuf>> {
        Ok(self
            .chain(node)?
            .iter()
            .map(|l| self.backend.layer_dir(&l.id))
            .collect())
    }

    /// Delete a node from the history; its children are re-parented to its parent. Refuses
    /// the HEAD of any environment and the last node of the store.
    pub fn delete_node(&self, env: &str, reference: &str) -> Result<Node> {
        let (_store, _env) = self.lock_env_exclusive(env, "delete")?;
        let state = self.env(env)?;
        let id = self.resolve_in(&state, reference)?;
        let node = self.node(&id)?;
        for other in self.envs()? {
            if other.head == id {
                return Err(Error::Refused {
                    action: "delete",
                    id: id.into_string(),
                    reason: format!(
                        "it is the HEAD of environment {:?} (check out another node first)",
                        other.name
                    ),
                });
            }
        }
        let nodes = self.nodes()?;
        if nodes.len() <= 1 {
            return Err(Error::Refused {
                action: "delete",
                id: id.into_string(),
                reason: "it is the last node".into(),
            });
        }
        self.remove_nodes_locked(&nodes, &[id.into_string()])?;
        // Tags and store refs pointing at a deleted node would dangle: drop them.
        self.drop_refs_to(&BTreeSet::from([node.id.as_str().to_owned()]))?;
        Ok(node)
    }

    /// Remove `ids` from the history (store lock held exclusively by the caller). Each is
    /// tombstoned, its children re-parented to its nearest surviving ancestor, then removed.
    pub(crate) fn remove_nodes_locked(
        &self,
        nodes: &BTreeMap<String, Node>,
        ids: &[String],
    ) -> Result<()> {
        let doomed: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let survivor = |mut p: Option<NodeId>| {
            while let Some(id) = p.clone() {
                if !doomed.contains(id.as_str()) {
                    break;
                }
                p = nodes.get(id.as_str()).and_then(|n| n.parent.clone());
            }
            p
        };
        for id in ids {
            let Some(node) = nodes.get(id) else { continue };
            let mut tomb = node.clone();
            tomb.deleted = Some(Tombstone {
                reparent_to: survivor(node.parent.clone()),
            });
            write_json(&self.layout.node(id), &tomb)?;
        }
        failpoint::hit("delete:after-tombstone");
        for id in ids {
            self.finish_tombstone(id)?;
        }
        Ok(())
    }

    /// Complete a deletion whose tombstone is on disk: re-parent children, remove the file.
    pub(crate) fn finish_tombstone(&self, id: &str) -> Result<()> {
        let Some(tomb) = self.read_node_file(id)? else {
            return Ok(());
        };
        let Some(t) = tomb.deleted.clone() else {
            return Ok(());
        };
        for (cid, mut child) in self.all_node_files()? {
            if child.parent.as_deref() == Some(id) {
                child.parent = t.reparent_to.clone();
                write_json(&self.layout.node(&cid), &child)?;
            }
        }
        failpoint::hit("delete:after-reparent");
        // A branch tip that goes hands its place to the ancestor its children move to,
        // when that one is the environment's own: else that ancestor's history would no
        // longer be found from any tip.
        let heir = match &t.reparent_to {
            Some(p) => self.node_following(p.as_str())?,
            None => None,
        };
        for mut state in self.envs()? {
            if state.tips.remove(id) {
                if let Some(h) = &heir {
                    if h.in_history_of(&state.name)
                        && h.created >= state.created
                        && h.seq < state.next_seq
                    {
                        state.tips.insert(h.id.as_str().to_owned());
                    }
                }
                self.write_env(&state)?;
            }
        }
        failpoint::hit("delete:after-tips");
        self.remove_node_file(id)?;
        atomic::sync_dir(&self.layout.nodes())?;
        Ok(())
    }

    /// Drop tags and store refs that point at removed nodes.
    pub(crate) fn drop_refs_to(&self, removed: &BTreeSet<String>) -> Result<()> {
        for mut state in self.envs()? {
            let before = state.tags.len();
            state.tags.retain(|_, id| !removed.contains(id));
            if state.tags.len() != before {
                self.write_env(&state)?;
            }
        }
        for (full, id) in self.refs()? {
            if removed.contains(&id) {
                fs_err::remove_file(self.ref_path(&full)?)?;
            }
        }
        Ok(())
    }
}
