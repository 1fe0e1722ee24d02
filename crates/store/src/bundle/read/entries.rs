//! Walking the tar stream: each entry dispatched to its node (manifest, end record, node
//! records, layer entries), the per-node state, and the final consistency checks of
//! [`State::finish`].

use super::*;

impl State<'_> {
    pub(super) fn bad_entry(&self, name: &str, message: impl std::fmt::Display) -> Error {
        bad(self.src, format!("entry {name}: {message}"))
    }

    pub(super) fn new_node(&self, id: &str, strict: bool, held: bool) -> Result<NodeState> {
        let dir = self.staging.join(id);
        if !held {
            match self.opts.make_layer_dir {
                Some(make) => make(&dir),
                None => DirBuilder::new().mode(0o700).create(&dir),
            }
            .map_err(|e| io_fail(self.src, &dir, "creating staged layer", e))?;
        }
        let mut kinds = HashMap::new();
        kinds.insert(PathBuf::new(), Kind::Dir);
        Ok(NodeState {
            dir,
            kinds,
            root_seen: false,
            entries: 0,
            hasher: blake3::Hasher::new(),
            checked_parent: None,
            dirs: Vec::new(),
            strict,
            held,
        })
    }

    pub(super) fn read_json<T: serde::de::DeserializeOwned, R: Read>(
        &self,
        name: &str,
        e: &mut tar::Entry<'_, R>,
    ) -> Result<T> {
        if e.size() > MAX_JSON {
            return Err(self.bad_entry(name, "too large"));
        }
        // The format requires a content checksum on every regular file of a history or
        // snapshot bundle, these two records included: a manifest or end record without
        // one is not what `agentbox export` writes, and nothing of it is believed.
        let mut want = None;
        if let Some(exts) = e
            .pax_extensions()
            .map_err(|err| self.bad_entry(name, format!("reading PAX records: {err}")))?
        {
            for x in exts {
                let x = x.map_err(|err| self.bad_entry(name, format!("bad PAX record: {err}")))?;
                if x.key_bytes() == PAX_BLAKE3.as_bytes() {
                    want = Some(x.value_bytes().to_vec());
                }
            }
        }
        let Some(want) = want else {
            return Err(self.bad_entry(
                name,
                format!(
                    "no {PAX_BLAKE3} record: the format requires a checksum on {name} \
                     (every bundle `agentbox export` writes has one)"
                ),
            ));
        };
        let mut data = Vec::new();
        e.read_to_end(&mut data)
            .map_err(|err| self.bad_entry(name, format!("reading: {err} (truncated?)")))?;
        if data.len() as u64 != e.size() {
            return Err(self.bad_entry(name, "truncated"));
        }
        let got = blake3::hash(&data).to_hex();
        if want != got.as_bytes() {
            return Err(self.bad_entry(
                name,
                format!(
                    "checksum mismatch: content hashes to {got}, the archive records {}",
                    String::from_utf8_lossy(&want)
                ),
            ));
        }
        serde_json::from_slice(&data)
            .map_err(|err| self.bad_entry(name, format!("invalid JSON: {err}")))
    }

    pub(super) fn entry<R: Read>(&mut self, e: &mut tar::Entry<'_, R>) -> Result<()> {
        let raw = e.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        self.last = name.clone();
        if e.header().entry_type().is_pax_global_extensions() {
            return Ok(());
        }
        let comps = components(&raw).map_err(|m| self.bad_entry(&name, m))?;
        if self.first {
            self.first = false;
            if is(&comps, MANIFEST_NAME) {
                let m: Manifest = self.read_json(&name, e)?;
                m.validate().map_err(|msg| self.bad_entry(&name, msg))?;
                self.kind = m.kind;
                for n in &m.nodes {
                    let ns = self.new_node(&n.id, true, (self.held)(&n.id))?;
                    self.nodes.insert(n.id.clone(), ns);
                    self.order.push(n.id.clone());
                }
                self.manifest = Some(m);
                return Ok(());
            }
            if is(&comps, END_NAME) || comps.first().is_some_and(|c| c == NODES_DIR) {
                return Err(self.bad_entry(
                    &name,
                    format!("{MANIFEST_NAME} must be the first entry of a bundle"),
                ));
            }
            self.kind = BundleKind::Rootfs;
            let ns = self.new_node(ROOTFS_LAYER, false, false)?;
            self.nodes.insert(ROOTFS_LAYER.to_owned(), ns);
            self.order.push(ROOTFS_LAYER.to_owned());
        }
        if self.kind == BundleKind::Rootfs {
            return self.extract(ROOTFS_LAYER, &name, comps, e);
        }
        if self.end.is_some() {
            return Err(self.bad_entry(&name, format!("entry after {END_NAME}")));
        }
        if is(&comps, END_NAME) {
            let end: EndRecord = self.read_json(&name, e)?;
            self.end = Some(end);
            return Ok(());
        }
        if is(&comps, MANIFEST_NAME) {
            return Err(self.bad_entry(&name, "a second manifest"));
        }
        if comps.len() >= 2 && comps[0] == OsStr::new(NODES_DIR) {
            let id = comps[1].to_string_lossy().into_owned();
            if !self.nodes.contains_key(&id) {
                return Err(self.bad_entry(
                    &name,
                    format!("belongs to node {id}, which the manifest does not list"),
                ));
            }
            let rest = comps[2..].to_vec();
            return self.extract(&id, &name, rest, e);
        }
        Err(self.bad_entry(&name, format!("unexpected entry outside {NODES_DIR}/")))
    }
}
impl State<'_> {
    pub(super) fn finish(mut self) -> Result<Imported> {
        if let Some(m) = &self.manifest {
            let Some(end) = self.end.take() else {
                return Err(bad(
                    self.src,
                    format!("truncated: {END_NAME} is missing after entry {}", self.last),
                ));
            };
            let total: u64 = self.nodes.values().map(|n| n.entries).sum();
            if end.nodes != m.nodes.len() as u64 || end.entries != total {
                return Err(bad(
                    self.src,
                    format!(
                        "{END_NAME} records {} nodes and {} entries, the archive holds {} and {total}",
                        end.nodes,
                        end.entries,
                        m.nodes.len()
                    ),
                ));
            }
            // Version 1 records each layer's count and checksum in the manifest, version 2
            // in end.json, in the manifest's node order.
            let (recorded, place): (Vec<(&str, u64, &str)>, &str) = if m.version == 1 {
                if !end.layers.is_empty() {
                    return Err(bad(
                        self.src,
                        format!("{END_NAME} of a version 1 bundle records layers"),
                    ));
                }
                let v1 = m
                    .nodes
                    .iter()
                    .map(|n| {
                        (
                            n.id.as_str(),
                            n.entries.unwrap_or_default(),
                            n.checksum.as_deref().unwrap_or_default(),
                        )
                    })
                    .collect();
                (v1, "the manifest")
            } else {
                let ids: Vec<&str> = end.layers.iter().map(|l| l.id.as_str()).collect();
                let listed: Vec<&str> = m.nodes.iter().map(|n| n.id.as_str()).collect();
                if ids != listed {
                    return Err(bad(
                        self.src,
                        format!(
                            "{END_NAME} records the layers of {ids:?}, the manifest lists {listed:?}"
                        ),
                    ));
                }
                let v2 = end
                    .layers
                    .iter()
                    .map(|l| (l.id.as_str(), l.entries, l.checksum.as_str()))
                    .collect();
                (v2, END_NAME)
            };
            for (id, entries, checksum) in recorded {
                let Some(ns) = self.nodes.get(id) else {
                    continue;
                };
                let got = ns.hasher.finalize().to_hex().to_string();
                if ns.entries != entries || got != checksum {
                    return Err(bad(
                        self.src,
                        format!(
                            "node {id}: the layer holds {} entries with checksum {got}, {place} \
                             records {entries} entries with checksum {checksum}",
                            ns.entries
                        ),
                    ));
                }
                if !ns.root_seen {
                    return Err(bad(
                        self.src,
                        format!("node {id}: the layer has no root entry"),
                    ));
                }
            }
        }
        let mut layers = Vec::new();
        let mut held = Vec::new();
        for id in &self.order {
            let Some(ns) = self.nodes.get_mut(id) else {
                continue;
            };
            if ns.held {
                held.push(id.clone());
                continue;
            }
            for (rel, perm, sec, nsec) in ns.dirs.iter().rev() {
                let p = fsutil::join(&ns.dir, rel);
                fsutil::set_perm(&p, *perm)
                    .and_then(|()| fsutil::set_mtime(&p, *sec, *nsec))
                    .map_err(|e| io_fail(self.src, &p, "directory metadata", e))?;
            }
            layers.push((id.clone(), ns.dir.clone()));
        }
        Ok(Imported {
            kind: self.kind,
            manifest: self.manifest.take(),
            layers,
            stripped_setuid: self.stripped_setuid,
            dropped_overlay_xattrs: self.dropped_overlay_xattrs,
            dropped_privileged_xattrs: self.dropped_privileged_xattrs,
            held,
        })
    }
}
