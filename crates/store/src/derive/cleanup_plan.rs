//! [`Store::cleanup_plan`]: what a cleanup does to a node's tree, found from its layers'
//! listings (each layer's own entries) as a derive does, resolving each matched path
//! through the chain ([`Resolver`]) instead of scanning the merged tree.

use super::*;

/// Whether a layer made by a derive with cleanup `done` is clean for a derive with
/// `delete` and `truncate`: every pattern of theirs is one `done` applied (compared as
/// compiled patterns, so `/tmp/**` and `tmp/**` are one). A truncate pattern among `done`'s
/// delete patterns counts too: nothing matching it is left at all.
pub(super) fn covers(done: &Cleanup, delete: &[PathPattern], truncate: &[PathPattern]) -> bool {
    let Ok((done_delete, done_truncate)) = done.compile() else {
        return false;
    };
    delete.iter().all(|p| done_delete.contains(p))
        && truncate
            .iter()
            .all(|p| done_truncate.contains(p) || done_delete.contains(p))
}

/// Add to `out` every path of `listing` that a pattern of `walk` matches. The listing is
/// walked with a stack of its current path's ancestors and their states, so an entry costs
/// one [`PatternWalk::step`] from its parent's state — a few byte comparisons where no
/// pattern part matches its name (listings put parents before children; any order is
/// correct, only slower) — and nothing below a directory where no pattern is alive is
/// stepped at all.
pub(super) fn collect_matches(
    listing: &Listing,
    walk: &mut PatternWalk<'_>,
    out: &mut BTreeSet<PathBuf>,
) {
    let mut names: Vec<&[u8]> = Vec::new();
    let mut states: Vec<SetState> = Vec::new();
    let mut comps: Vec<&[u8]> = Vec::new();
    for raw in listing.paths() {
        comps.clear();
        comps.extend(raw.split(|&b| b == b'/').filter(|c| !c.is_empty()));
        let mut keep = 0;
        while keep < names.len() && keep < comps.len() && names[keep] == comps[keep] {
            keep += 1;
        }
        names.truncate(keep);
        states.truncate(keep);
        for &name in &comps[keep..] {
            let parent = states.last().copied().unwrap_or_else(|| walk.root());
            if !walk.alive(parent) {
                break;
            }
            states.push(walk.step(parent, name));
            names.push(name);
        }
        if !comps.is_empty()
            && names.len() == comps.len()
            && states.last().is_some_and(|&s| walk.accepts(s))
        {
            out.insert(crate::listing::as_path(raw).to_owned());
        }
    }
}

/// An entry of a merged tree as [`scan_chain`] reports it, with (for a directory) the
/// directories it merges, topmost first, cut at the first opaque one.
#[derive(Debug, Clone)]
struct Resolved {
    entry: Entry,
    merged: Vec<PathBuf>,
}

/// Looks single paths up in the merged tree of a chain, by the rules of [`scan_chain`]:
/// the first layer (top-down) holding a name decides it; a whiteout hides it; a
/// non-directory hides everything below; directories merge down to the first opaque one.
/// Lookups are cached, so the ancestors shared by many paths are read once.
struct Resolver<'a> {
    layers: &'a [PathBuf],
    /// The layers' opaque-directory attribute.
    opaque: &'a str,
    cache: HashMap<PathBuf, Option<Resolved>>,
}

impl<'a> Resolver<'a> {
    pub(super) fn new(layers: &'a [PathBuf], opaque: &'a str) -> Resolver<'a> {
        Resolver {
            layers,
            opaque,
            cache: HashMap::new(),
        }
    }

    pub(super) fn root(&self) -> Result<Resolved> {
        let top = self.layers.first().ok_or_else(|| Error::Backend {
            path: PathBuf::new(),
            message: "derive from an empty chain".into(),
        })?;
        let mut merged = Vec::new();
        let mut root_meta = None;
        for layer in self.layers {
            let meta = read_meta(layer)?;
            if !meta.is_dir() {
                return Err(Error::Backend {
                    path: layer.clone(),
                    message: "a layer root must be a directory".into(),
                });
            }
            // Every root merges: overlayfs reads no `opaque` attribute on a layer's root.
            merged.push(layer.clone());
            if root_meta.is_none() {
                root_meta = Some(meta);
            }
        }
        let mut meta = root_meta.ok_or_else(|| Error::Backend {
            path: top.clone(),
            message: "derive from an empty chain".into(),
        })?;
        strip_overlay_xattrs(&mut meta);
        Ok(Resolved {
            entry: Entry {
                rel: PathBuf::new(),
                src: top.clone(),
                meta,
            },
            merged,
        })
    }

    /// The entry at `rel` in the merged tree, `None` when the tree has none.
    pub(super) fn get(&mut self, rel: &Path) -> Result<Option<Resolved>> {
        if let Some(r) = self.cache.get(rel) {
            return Ok(r.clone());
        }
        let found = match (rel.parent(), rel.file_name()) {
            (Some(parent), Some(name)) => match self.get(parent)? {
                Some(p) if p.entry.meta.is_dir() => self.child(&p, rel, name)?,
                _ => None,
            },
            _ => Some(self.root()?),
        };
        self.cache.insert(rel.to_owned(), found.clone());
        Ok(found)
    }

    /// Child `name` (at `rel`) of the merged directory `parent`.
    pub(super) fn child(
        &self,
        parent: &Resolved,
        rel: &Path,
        name: &std::ffi::OsStr,
    ) -> Result<Option<Resolved>> {
        Ok(
            crate::fsops::scan::merged_child(&parent.merged, name, self.opaque)?.map(
                |(src, mut meta, merged)| {
                    strip_overlay_xattrs(&mut meta);
                    Resolved {
                        entry: Entry {
                            rel: rel.to_owned(),
                            src,
                            meta,
                        },
                        merged,
                    }
                },
            ),
        )
    }
}

impl Store {
    /// What `cleanup` does to the tree of `node`: the plan [`Store::derive`] applies, found
    /// from the layers' listings as `derive` does (falling back to a scan of the whole tree
    /// where it must). Always equal to `cleanup.plan(&scan_chain(chain))`.
    pub fn cleanup_plan(&self, node: &Node, cleanup: &Cleanup) -> Result<CleanupPlan> {
        let (delete, truncate) = cleanup.compile()?;
        let _store = self.lock_store(Mode::Shared, "plan a cleanup")?;
        let chain = self.chain(node)?;
        let dirs: Vec<PathBuf> = chain
            .iter()
            .map(|l| self.backend.layer_dir(&l.id))
            .collect();
        if let Some(plan) = self.plan_from_listings(&chain, &dirs, &delete, &truncate)? {
            return Ok(plan);
        }
        let tree = scan_chain(
            &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            self.backend.opaque_xattr(),
        )?;
        Ok(plan(&delete, &truncate, &tree))
    }

    /// The plan of a cleanup on the merged tree of `chain` (whose layer directories are
    /// `dirs`), found without walking that tree, or `None` when it has to be walked.
    ///
    /// A path the cleanup edits is an entry of the merged tree, so it is an entry of the
    /// layer providing it, so (by the listing invariant, see [`crate::listing`]) it is in
    /// the listing of that layer or of one it descends from through listing bases — unless
    /// the lineage first reaches a layer some derive already cleaned with these patterns
    /// ([`covers`]), where what it could find is known clean: every such entry is that
    /// layer's own, which has no path a delete pattern matches and no non-empty file a
    /// truncate pattern matches. So the candidates are the paths of those listings that
    /// some pattern matches (found by matching names in memory, no filesystem access); each
    /// is then looked up in the merged tree by the rules of [`scan_chain`], and the plan is
    /// made from what is there exactly as [`Cleanup::plan`] makes it from a whole scan.
    ///
    /// `None` (the caller scans the whole tree): a pattern too long for a cursor, a lineage
    /// that cannot be followed (a base layer whose record or data is gone), or an emptied
    /// file with other names, which may be anywhere in the tree.
    pub(super) fn plan_from_listings(
        &self,
        chain: &[LayerRecord],
        dirs: &[PathBuf],
        delete: &[PathPattern],
        truncate: &[PathPattern],
    ) -> Result<Option<CleanupPlan>> {
        let mut timer = agentbox_core::timing::Timer::start("derive");
        let patterns: Vec<&PathPattern> = delete.iter().chain(truncate).collect();
        if patterns.is_empty() {
            return Ok(Some(CleanupPlan::default()));
        }
        let Some(mut walk) = PatternWalk::new(patterns) else {
            return Ok(None);
        };
        let mut candidates = BTreeSet::new();
        let mut next = chain.first().cloned();
        let mut hops = 0usize;
        while let Some(layer) = next {
            if layer
                .cleaned
                .as_ref()
                .is_some_and(|done| covers(done, delete, truncate))
            {
                break;
            }
            let Some(listing) = self.listing_of(&layer)? else {
                return Ok(None);
            };
            collect_matches(&listing, &mut walk, &mut candidates);
            next = match &listing.base {
                None => None,
                Some(base) => {
                    match read_json_opt::<LayerRecord>(&self.layout.layer_record(base))? {
                        Some(record) => Some(record),
                        None => return Ok(None),
                    }
                }
            };
            hops += 1;
            if hops > 4096 {
                // A loop of bases cannot be made by this store; never trust one.
                return Ok(None);
            }
        }
        timer.lap("listings");
        let mut resolver = Resolver::new(dirs, self.backend.opaque_xattr());
        let mut deleted: Vec<Resolved> = Vec::new();
        let mut deleted_set: HashSet<PathBuf> = HashSet::new();
        let mut emptied: Vec<Entry> = Vec::new();
        // Parents come before their children (the set is sorted by path), so a removed
        // directory is seen before anything below it.
        for rel in &candidates {
            if rel.ancestors().skip(1).any(|a| deleted_set.contains(a)) {
                continue;
            }
            let Some(found) = resolver.get(rel)? else {
                continue;
            };
            let c = components(rel);
            if delete.iter().any(|p| p.matches(&c)) {
                deleted_set.insert(rel.clone());
                deleted.push(found);
                continue;
            }
            let meta = &found.entry.meta;
            if meta.kind == Kind::File && meta.size > 0 && truncate.iter().any(|p| p.matches(&c)) {
                if meta.nlink > 1 {
                    return Ok(None);
                }
                emptied.push(found.entry);
            }
        }
        let mut out = CleanupPlan::default();
        let mut counted: HashSet<(u64, u64)> = HashSet::new();
        let mut count = |e: &Entry| {
            if e.meta.kind == Kind::File && counted.insert((e.meta.dev, e.meta.ino)) {
                out.bytes += e.meta.size;
            }
        };
        for d in &deleted {
            count(&d.entry);
            if d.entry.meta.is_dir() {
                for e in scan_chain_below(&d.merged, &d.entry.rel, self.backend.opaque_xattr())?
                    .entries
                    .values()
                {
                    count(e);
                }
            }
        }
        for e in &emptied {
            count(e);
        }
        for rel in deleted
            .iter()
            .map(|d| d.entry.rel.as_path())
            .chain(emptied.iter().map(|e| e.rel.as_path()))
        {
            for a in rel.ancestors().skip(1) {
                if out.dirs.contains_key(a) {
                    break;
                }
                if let Some(found) = resolver.get(a)? {
                    out.dirs.insert(a.to_owned(), found.entry);
                }
            }
        }
        out.delete = deleted.into_iter().map(|d| d.entry).collect();
        out.truncate = emptied;
        timer.lap("lookups");
        Ok(Some(out))
    }

    /// The listing of `layer` (see [`crate::listing::of_layer`]).
    pub(super) fn listing_of(&self, layer: &LayerRecord) -> Result<Option<Listing>> {
        crate::listing::of_layer(
            &self.layout.layers(),
            &self.backend.layer_dir(&layer.id),
            layer,
        )
    }
}
