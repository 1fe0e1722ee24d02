//! References: resolving a name (`HEAD~N`, tags, node ids, store refs) to a node, and
//! writing tags and store refs.

use super::*;

impl Store {
    /// Resolve a reference in the context of `env`: `HEAD`, `HEAD~N`, a tag of the
    /// environment, a store-wide ref `ns/name`, a full id, or a unique id prefix (≥ 4 hex).
    pub fn resolve(&self, env: &str, reference: &str) -> Result<NodeId> {
        let state = self.env(env)?;
        self.resolve_in(&state, reference)
    }

    pub(crate) fn resolve_in(&self, state: &EnvState, reference: &str) -> Result<NodeId> {
        let unknown = || Error::UnknownRef {
            reference: reference.to_owned(),
        };
        if reference == "HEAD" {
            return Ok(state.head.clone());
        }
        if let Some(n) = head_steps(reference) {
            let n = n.ok_or_else(unknown)?;
            // Parent by parent: costs N node reads, whatever the size of the store.
            let mut id = state.head.clone();
            for _ in 0..n {
                id = self
                    .node_following(id.as_str())?
                    .and_then(|node| node.parent)
                    .ok_or_else(unknown)?;
            }
            // The last parent may itself be mid-deletion: name what it moves to.
            return self
                .node_following(id.as_str())?
                .map(|n| n.id)
                .ok_or_else(unknown);
        }
        if let Some(id) = state.tags.get(reference) {
            return Ok(NodeId::from_trusted(id.as_str()));
        }
        self.resolve_node(reference)
    }

    /// Resolve a reference outside any environment: a store-wide ref `ns/…/name`, a full
    /// id, or a unique id prefix (≥ 4 hex).
    pub fn resolve_node(&self, reference: &str) -> Result<NodeId> {
        let unknown = || Error::UnknownRef {
            reference: reference.to_owned(),
        };
        if reference.contains('/') {
            if let Some(id) = self.get_ref(reference)? {
                return Ok(id);
            }
            return Err(unknown());
        }
        if id::is_full_id(reference) {
            return match self.read_node_file(reference)? {
                Some(n) if n.deleted.is_none() => Ok(n.id),
                _ => Err(unknown()),
            };
        }
        if id::is_hex(reference) && reference.len() >= id::MIN_PREFIX {
            let matches = self.ids_with_prefix(reference)?;
            return match matches.len() {
                0 => Err(unknown()),
                1 => Ok(NodeId::from_trusted(
                    matches.into_iter().next().expect("one match"),
                )),
                _ => Err(Error::AmbiguousRef {
                    reference: reference.to_owned(),
                    candidates: matches,
                }),
            };
        }
        Err(unknown())
    }

    /// Set or move tag `name` of `env` to `reference`.
    pub fn set_tag(&self, env: &str, name: &str, reference: &str) -> Result<NodeId> {
        names::validate("tag", name)?;
        let _g = self.lock_env(env, "tag")?;
        let mut state = self.env(env)?;
        let id = self.resolve_in(&state, reference)?;
        state.tags.insert(name.to_owned(), id.as_str().to_owned());
        self.write_env(&state)?;
        Ok(id)
    }

    /// Delete tag `name` of `env`; returns the node it pointed at.
    pub fn delete_tag(&self, env: &str, name: &str) -> Result<NodeId> {
        let _g = self.lock_env(env, "tag")?;
        let mut state = self.env(env)?;
        let id = state.tags.remove(name).ok_or_else(|| Error::UnknownRef {
            reference: name.to_owned(),
        })?;
        self.write_env(&state)?;
        Ok(NodeId::from_trusted(id))
    }

    /// Store-wide named ref `ns/name` or `ns/dir/…/name` (checkpoints:
    /// `checkpoints/<project key>/<name>`, see [`names::validate_ref`]), `None` when unset.
    pub fn get_ref(&self, full: &str) -> Result<Option<NodeId>> {
        let path = self.ref_path(full)?;
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(NodeId::from_trusted(s.trim()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io(io_at(&path, e))),
        }
    }

    /// Point store-wide ref `full` at node `id` (or remove it with `None`). A ref is a
    /// root for GC and retention: the node it names, with its ancestors and its whole
    /// layer chain, stays until the ref goes.
    pub fn set_ref(&self, full: &str, id: Option<&str>) -> Result<()> {
        let path = self.ref_path(full)?;
        let _store = self.lock_store(Mode::Shared, "set ref")?;
        match id {
            Some(id) => {
                self.node(id)?;
                self.write_ref_locked(&path, id)?;
            }
            None => match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::Io(io_at(&path, e))),
            },
        }
        Ok(())
    }

    /// Write ref file `path` (from [`Store::ref_path`]) naming `id`, durably (store lock
    /// held, the node checked to exist and durable).
    pub(crate) fn write_ref_locked(&self, path: &Path, id: &str) -> Result<()> {
        // Directories made for the ref are made durable too: a ref that survives a crash
        // must be reachable by its path.
        let root = self.layout.refs();
        let mut missing: Vec<&Path> = path
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(&root) && *a != root.as_path())
            .filter(|a| !a.is_dir())
            .collect();
        missing.reverse();
        for dir in missing {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::Io(io_at(dir, e))),
            }
            if let Some(parent) = dir.parent() {
                atomic::sync_dir(parent)?;
            }
        }
        atomic::write_atomic(path, format!("{id}\n").as_bytes())?;
        Ok(())
    }

    /// Every store-wide ref, `ns/…/name` → node id. Files under `refs/` whose path is not
    /// a valid ref name (see [`names::validate_ref`]) are not refs and are skipped.
    pub fn refs(&self) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        let root = self.layout.refs();
        if !root.exists() {
            return Ok(out);
        }
        // (directory, its ref-name prefix); refs are at most 8 components deep.
        let mut dirs = vec![(root, String::new())];
        while let Some((dir, prefix)) = dirs.pop() {
            for entry in fs_err::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if atomic::is_tmp_name(&name) {
                    continue;
                }
                let full = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                };
                if entry.file_type()?.is_dir() {
                    if full.split('/').count() < 8 {
                        dirs.push((entry.path(), full));
                    }
                    continue;
                }
                if names::validate_ref(&full).is_err() {
                    continue;
                }
                if let Some(id) = self.get_ref(&full)? {
                    out.insert(full, id.into_string());
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn ref_path(&self, full: &str) -> Result<PathBuf> {
        let mut path = self.layout.refs();
        path.extend(names::validate_ref(full)?);
        Ok(path)
    }
}

/// How many parents back from HEAD `reference` names: `HEAD~`/`HEAD^` one, `HEAD~N`/`HEAD^N`
/// N; `Some(None)` for a malformed count, `None` for a reference of another form (`HEAD`
/// itself included). One parser for the store and for whoever resolves on its behalf.
pub fn head_steps(reference: &str) -> Option<Option<usize>> {
    let rest = reference
        .strip_prefix("HEAD~")
        .or_else(|| reference.strip_prefix("HEAD^"))?;
    Some(if rest.is_empty() {
        Some(1)
    } else {
        rest.parse().ok()
    })
}
