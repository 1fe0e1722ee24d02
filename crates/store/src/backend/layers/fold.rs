//! Layers made from other layers rather than from the upper directory: a derive's edits
//! over its source's chain ([`LayersBackend::write_edits`]), and the folding of a chain or
//! of its top into one layer (flattening, compaction at `max_depth`, a box's chain).

use super::*;

impl LayersBackend {
    /// Where a derive keeps the templates its layer's entries are copied from. Named like a
    /// temporary layer so that `reconcile` and `prune` remove it after a crash.
    pub(super) fn scratch(&self, id: &str) -> PathBuf {
        self.layers.join(format!(".tmp-{id}-scratch"))
    }

    /// Write at `dst` the overlay layer of `plan` over the tree it was computed from: the
    /// directories of `plan.dirs` (with the merged tree's metadata, without overlay
    /// markers, so they merge with the layers below), a whiteout per removed entry and an
    /// empty file (with the original's metadata; hard links kept) per emptied one.
    /// Returns the path of every entry written (the layer's listing).
    pub(super) fn write_edits(
        &self,
        plan: &crate::derive::CleanupPlan,
        scratch: &Path,
        dst: &Path,
    ) -> Result<Vec<PathBuf>> {
        let mut tree = Tree::default();
        for (rel, e) in &plan.dirs {
            let mut e = e.clone();
            strip_overlay_xattrs(&mut e.meta);
            tree.entries.insert(rel.clone(), e);
        }
        if !plan.truncate.is_empty() {
            let empty = scratch.join("empty");
            fs_err::write(&empty, b"")?;
            for e in &plan.truncate {
                let mut meta = e.meta.clone();
                strip_overlay_xattrs(&mut meta);
                tree.entries.insert(
                    e.rel.clone(),
                    Entry {
                        rel: e.rel.clone(),
                        src: empty.clone(),
                        meta,
                    },
                );
            }
        }
        if !plan.delete.is_empty() {
            let template = scratch.join("whiteout");
            make_whiteout(&template)?;
            let meta = read_meta(&template)?;
            for e in &plan.delete {
                tree.entries.insert(
                    e.rel.clone(),
                    Entry {
                        rel: e.rel.clone(),
                        src: template.clone(),
                        meta: meta.clone(),
                    },
                );
            }
        }
        copy_tree(&tree, dst, &copy_opts())?;
        Ok(tree.entries.into_keys().collect())
    }
}
impl LayersBackend {
    /// Write the tree of `chain` (top first) as one complete layer at `dst` (which must not
    /// exist). `over_base`: the chain is a box's, whose layers sit on its base (`base`, when
    /// known: only the whiteouts that hide something of it are kept), so their
    /// overlay markers must survive: the layers are folded bottom-up, each applied with its
    /// whiteouts and opaque directories kept as they are. Otherwise the merged tree is
    /// copied without markers. Data is reflinked where the filesystem can. Returns the
    /// paths written when they are known without a walk (the merged tree's).
    pub(super) fn fold_into(
        &self,
        chain: &[LayerRecord],
        dst: &Path,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<Option<Vec<PathBuf>>> {
        if !over_base {
            let dirs = self.chain_dirs(chain);
            let tree = crate::fsops::scan::scan_chain(
                &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                self.opaque,
            )?;
            copy_tree(&tree, dst, &self.linking_opts())?;
            return Ok(Some(tree.entries.into_keys().collect()));
        }
        let dirs = self.chain_dirs(chain);
        crate::backend::apply::fold_over_base(
            &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            dst,
            self.opaque,
            Some(&self.layers),
            base.map(|b| crate::backend::apply::Below::new(Vec::new(), Some(b.clone())))
                .as_ref(),
        )?;
        Ok(None)
    }

    /// How a commit of an environment or a box whose chain (`chain`, top first) is at the
    /// maximum depth folds it ([`Self::compact`]): the number of layers at the top of the
    /// chain to fold, with the commit's changes, into one layer over the layer below them;
    /// `None` for one layer of the whole chain instead (an environment's complete layer, a
    /// box's fold of all its layers). A box's bottom layer is its first one, over its base.
    ///
    /// * The commits' own layers above the topmost compacted layer, when there are at
    ///   least two of them and fewer than [`MAX_COMPACTED`] compacted layers: the cost is
    ///   what those commits changed, whatever the history below.
    /// * Otherwise every layer above the complete bottom one, when their paths, each
    ///   counted once, are at most a quarter of its entries (from the listings; a layer
    ///   without one is walked once, and keeps the result).
    /// * Otherwise none: folding most of a tree into a diff costs what a complete layer
    ///   costs, and would keep the bottom layer's replaced files on disk for as long as the
    ///   chain lives.
    pub(super) fn compaction(&self, chain: &[LayerRecord]) -> Result<Option<usize>> {
        let Some((bottom, above)) = chain.split_last() else {
            return Ok(None);
        };
        if bottom.parent.is_some() || above.is_empty() {
            return Ok(None);
        }
        let commits = above.iter().take_while(|l| !l.compacted).count();
        if commits >= 2 && above.len() - commits < MAX_COMPACTED {
            return Ok(Some(commits));
        }
        let listing =
            |l: &LayerRecord| crate::listing::of_layer(&self.layers, &self.layer_dir(&l.id), l);
        // Every layer lists the directories leading to its changes, mostly the same ones.
        let mut listings = Vec::with_capacity(above.len());
        for l in above {
            match listing(l)? {
                Some(found) => listings.push(found),
                None => return Ok(None),
            }
        }
        let diff: std::collections::HashSet<&[u8]> =
            listings.iter().flat_map(Listing::paths).collect();
        Ok(listing(bottom)?
            .filter(|b| diff.len() * 4 <= b.count())
            .map(|_| above.len()))
    }

    /// The commit of an environment or a box whose chain is at the maximum depth, folding
    /// the top `n` layers of `chain` ([`Self::compaction`]): the new layer is those layers
    /// and the working changes folded into one diff over the layer below them, at a cost of
    /// what they changed, not of the whole tree; whiteouts that hide nothing of the layers
    /// below (and, for a box, of its base) are left out — all kept for a box whose base is
    /// not known. Returns the marks to record and the new layer's entries (its listing).
    pub(super) fn compact(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        n: usize,
        id: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let (top, below) = chain.split_at(n.min(chain.len()));
        let under = self.chain_dirs(below);
        let under = match (&dirs.mountpoint, &dirs.base) {
            (Some(_), _) => Some(Below::new(under, None)),
            (None, Some(base)) => Some(Below::new(under, Some(base.clone()))),
            (None, None) => None,
        };
        let now = self.fold_with_changes(dirs, top, under, id)?;
        Ok((now, crate::listing::walk(&self.tmp_layer(id))?))
    }

    /// Flatten a box's chain plus its working changes into one layer `id`, its overlay
    /// markers kept (it sits on the box's base). With the base known (`dirs.base`), the
    /// whiteouts that hide nothing of it are left out (see `apply::idle_whiteout`).
    pub(super) fn flatten_box(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<NewMarks> {
        let base = dirs.base.clone().map(|b| Below::new(Vec::new(), Some(b)));
        self.fold_with_changes(dirs, chain, base, id)
    }

    /// Write `self.tmp_layer(id)`: the layers `layers` (top first) and the working changes
    /// since the last commit folded into one (`apply::fold_over_base`, over `base` when
    /// given). Files of the folded layers are linked, not copied; the working changes are
    /// captured into a scratch directory first (linked from there in turn). Returns the
    /// marks to record.
    pub(super) fn fold_with_changes(
        &self,
        dirs: &WorkDirs,
        layers: &[LayerRecord],
        base: Option<Below>,
        id: &str,
    ) -> Result<NewMarks> {
        let mut timer = agentbox_core::timing::Timer::start("fold");
        self.durability.mark_unsynced();
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        let scratch = self.scratch(id);
        self.remove_tree(&scratch)?;
        fs_err::create_dir_all(&scratch)?;
        let folded = Self::capture_into(dirs, &scratch, self.opaque).and_then(|(now, _)| {
            timer.lap("capture");
            let mut all = vec![scratch.clone()];
            all.extend(self.chain_dirs(layers));
            crate::backend::apply::fold_over_base(
                &all.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                &tmp,
                self.opaque,
                Some(&self.layers),
                base.as_ref(),
            )?;
            timer.lap("layers");
            Ok(now)
        });
        self.remove_tree(&scratch)?;
        folded
    }
}
