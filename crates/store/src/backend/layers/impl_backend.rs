//! The [`Backend`] trait for [`LayersBackend`]: each operation composed from the capture,
//! handoff and fold steps of the sibling modules.

use super::*;

impl Backend for LayersBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Layers
    }

    fn opaque_xattr(&self) -> &'static str {
        self.opaque
    }

    fn layer_dir(&self, id: &str) -> PathBuf {
        self.layers.join(id)
    }

    fn layer_from_dir(&self, src: &Path, id: &str) -> Result<LayerRecord> {
        self.durability.mark_unsynced();
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        fs_err::create_dir_all(&tmp)?;
        let tree = scan_tree(src)?;
        let flusher = Flusher::start(&tmp);
        copy_tree(&tree, &tmp, &copy_opts())?;
        drop(flusher);
        self.publish(id)?;
        Listing::new(None, tree.entries.keys().map(PathBuf::as_path)).write(&self.layers, id)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn layer_from_staged(&self, staged: &Path, id: &str) -> Result<LayerRecord> {
        self.durability.mark_unsynced();
        fs_err::rename(staged, self.tmp_layer(id))?;
        self.publish(id)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn layer_from_oci_diff(
        &self,
        staged: &Path,
        base: &[LayerRecord],
        id: &str,
    ) -> Result<LayerRecord> {
        let top = base.first().ok_or_else(|| Error::Backend {
            path: staged.to_owned(),
            message: "a layer diff needs a base layer".into(),
        })?;
        self.durability.mark_unsynced();
        // A layer that marks its root opaque hides the whole base, which overlayfs cannot
        // express (it reads no `opaque` attribute on a layer's root): it is applied like one
        // too deep to stack.
        let root_opaque = staged.join(crate::bundle::OPAQUE_MARKER).exists();
        if top.depth + 1 > self.max_depth || root_opaque {
            // Too deep to stack: store the applied result as a complete layer.
            let work = staged.with_extension("full");
            self.remove_tree(&work)?;
            fs_err::create_dir_all(&work)?;
            let dirs: Vec<PathBuf> = base.iter().map(|l| self.layer_dir(&l.id)).collect();
            let refs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
            copy_tree(
                &crate::fsops::scan::scan_chain(&refs, self.opaque)?,
                &work,
                &copy_opts(),
            )?;
            crate::bundle::apply_layer(staged, &work)?;
            self.remove_tree(staged)?;
            return self.layer_from_staged(&work, id);
        }
        crate::bundle::to_overlay_layer(staged)?;
        fs_err::rename(staged, self.tmp_layer(id))?;
        self.publish(id)?;
        Ok(LayerRecord::new(id, Some(top.id.clone()), top.depth + 1))
    }

    fn empty_layer(&self, id: &str) -> Result<LayerRecord> {
        let tmp = self.tmp_layer(id);
        fs_err::create_dir_all(&tmp)?;
        self.publish(id)?;
        Ok(LayerRecord::new(id, None, 1))
    }

    fn reset_work(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        let mut timer = agentbox_core::timing::Timer::start("reset work");
        self.unmount(dirs)?;
        timer.lap("unmount");
        failpoint::hit("checkout:after-unmount");
        // The box runs again without waiting for the removal of what it wrote.
        self.trash.discard(&dirs.work)?;
        timer.lap("set the old work area aside");
        fs_err::create_dir_all(Self::ovl(dirs))?;
        self.fresh_upper(dirs, chain)?;
        self.mount_overlay(dirs, chain)?;
        timer.lap("fresh upper and mount");
        Ok(())
    }

    fn commit(&self, dirs: &WorkDirs, chain: &[LayerRecord], id: &str) -> Result<LayerRecord> {
        let head = chain.first().ok_or_else(|| Error::Backend {
            path: dirs.work.clone(),
            message: "commit without a HEAD layer".into(),
        })?;
        if let Some(mountpoint) = &dirs.mountpoint {
            if !crate::mounts::is_our_overlay(mountpoint) {
                return Err(Error::Backend {
                    path: mountpoint.clone(),
                    message: "the working tree is not mounted (run `agentbox mount` first)".into(),
                });
            }
        }
        // What the new layer holds, for its listing (none for a folded box layer, which a
        // derive walks if it ever needs to).
        let mut listing = None;
        // The new layer's parent: HEAD's, but for a chain past the maximum depth.
        let mut parent = Some(head);
        let too_deep = head.depth + 1 > self.max_depth;
        // How many layers of the top of the chain a compaction folds into the new layer.
        let fold_top = if too_deep {
            let mut timer = agentbox_core::timing::Timer::start("compact");
            let plan = self.compaction(chain)?;
            timer.lap("plan");
            plan
        } else {
            None
        };
        let mut compacted = false;
        let now = if let Some(n) = fold_top {
            let (now, paths) = self.compact(dirs, chain, n, id)?;
            let below = chain.get(n);
            listing = Some(Listing::new(
                below.map(|b| b.id.clone()),
                paths.iter().map(PathBuf::as_path),
            ));
            parent = below;
            compacted = true;
            now
        } else if too_deep && dirs.mountpoint.is_none() {
            parent = None;
            self.flatten_box(dirs, chain, id)?
        } else if too_deep {
            parent = None;
            // Flatten: the new layer is the complete merged tree.
            self.durability.mark_unsynced();
            let tmp = self.tmp_layer(id);
            self.remove_tree(&tmp)?;
            fs_err::create_dir_all(&tmp)?;
            // The upper directory before the view: a file written in between shows new
            // metadata in the view and is copied from it.
            let upper = Self::scan_upper(dirs)?;
            let view = self.working_view(dirs, chain)?;
            let mut tree = scan_tree(&view.path)?;
            for e in tree.entries.values_mut() {
                strip_overlay_xattrs(&mut e.meta);
            }
            self.point_at_layers(&mut tree, chain, &upper)?;
            copy_tree(&tree, &tmp, &self.linking_opts())?;
            listing = Some(Listing::new(
                None,
                tree.entries.keys().map(PathBuf::as_path),
            ));
            let mut now = Captured::default();
            for (rel, e) in &upper.entries {
                if let Some(k) = rel.to_str().filter(|k| !k.is_empty()) {
                    now.marks.insert(k.to_owned(), Self::mark(&e.meta));
                }
            }
            NewMarks::Whole(now)
        } else if let Some((now, paths)) = self.try_handoff(dirs, chain, id)? {
            listing = Some(Listing::new(
                Some(head.id.clone()),
                paths.iter().map(PathBuf::as_path),
            ));
            now
        } else {
            let (now, paths) = self.capture_changes(dirs, id)?;
            listing = Some(Listing::new(
                Some(head.id.clone()),
                paths.iter().map(PathBuf::as_path),
            ));
            now
        };
        failpoint::hit("commit:after-copy");
        Self::stage_marks(dirs, now)?;
        self.publish(id)?;
        if let Some(l) = listing {
            l.write(&self.layers, id)?;
        }
        Ok(LayerRecord {
            compacted,
            ..LayerRecord::new(
                id,
                parent.map(|p| p.id.clone()),
                parent.map_or(1, |p| p.depth + 1),
            )
        })
    }

    fn make_durable(&self, files: &[PathBuf]) -> Result<()> {
        self.durability.make_durable(files)
    }

    fn unfinished_commit(&self, dirs: &WorkDirs) -> Result<Option<String>> {
        // Only while the working files are away from the upper directory; only ever a
        // layer id (the marker names a directory of the store to move).
        if Self::upper(dirs).exists() {
            return Ok(None);
        }
        Ok(Self::load_handoff(dirs)?
            .map(|h| h.layer)
            .filter(|l| agentbox_core::id::is_full_id(l)))
    }

    fn abandon(&self, dirs: &WorkDirs, id: &str) -> Result<()> {
        match Self::load_handoff(dirs)? {
            Some(h) if h.layer == id => self.give_back(dirs, id),
            _ => Ok(()),
        }
    }

    fn committed(&self, dirs: &WorkDirs, layer: &LayerRecord) -> Result<()> {
        Self::adopt_marks(dirs)?;
        if let Some(h) = Self::load_handoff(dirs)? {
            if h.layer == layer.id {
                return self.finish_handoff(dirs, &h);
            }
        }
        Ok(())
    }

    fn mount(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        if dirs
            .mountpoint
            .as_deref()
            .is_some_and(crate::mounts::is_our_overlay)
        {
            return Ok(());
        }
        if let Some(h) = Self::load_handoff(dirs)? {
            if chain.first().is_some_and(|top| top.id == h.layer) {
                // The handoff's node is HEAD: its layer holds the upper directory's
                // entries (the same inodes), so the upper directory goes.
                return self.finish_handoff(dirs, &h);
            }
            // The commit never happened (the store's recovery gives an interrupted one's
            // files back before anything mounts; HEAD moving elsewhere discards the work
            // area, marker included): the working files are the upper directory, or still
            // under the unpublished layer's name.
            if !self.layer_dir(&h.layer).exists() {
                self.give_back(dirs, &h.layer)?;
            }
            self.adopt_strays(dirs, &h)?;
            let marker = Self::handoff_path(dirs);
            if marker.exists() {
                fs_err::remove_file(&marker)?;
            }
        }
        fs_err::create_dir_all(Self::upper(dirs))?;
        fs_err::create_dir_all(Self::ovl(dirs))?;
        self.mount_overlay(dirs, chain)
    }

    fn unmount(&self, dirs: &WorkDirs) -> Result<()> {
        // Only ever our own overlay: the user's directory may itself sit on another mount.
        let Some(mountpoint) = &dirs.mountpoint else {
            return Ok(());
        };
        while crate::mounts::is_our_overlay(mountpoint) {
            rustix::mount::unmount(mountpoint, UnmountFlags::DETACH)
                .map_err(|e| Error::Io(io_at(mountpoint, e.into())))?;
        }
        Ok(())
    }

    /// One `lstat` per entry of the upper directory, compared with the marks of the last
    /// commit: O(what changed since checkout), like a commit.
    fn box_layers(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<BoxLayers> {
        self.settle_box_handoff(dirs, chain)?;
        Self::box_layers_over(dirs, self.chain_dirs(chain))
    }

    /// The mount point, or (for a box) a read-only overlay of the upper directory over the
    /// chain, mounted for as long as the view lives. Whiteouts of the box's base are not
    /// part of that view: it shows the layer, not the box's whole root.
    fn working_view(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<WorkingView> {
        if let Some(mountpoint) = &dirs.mountpoint {
            return Ok(WorkingView::existing(mountpoint.clone()));
        }
        Self::box_view(dirs, self.chain_dirs(chain))
    }

    fn remove_work(&self, dirs: &WorkDirs) -> Result<()> {
        self.remove_tree(&dirs.work)
    }

    fn remove_layer(&self, id: &str) -> Result<()> {
        // Also the layer's temporary forms, as the btrfs backend does: a caller taking back
        // a failed import or derive removes whatever stage the layer reached.
        self.remove_tree(&self.tmp_layer(id))?;
        self.remove_tree(&self.scratch(id))?;
        crate::listing::remove(&self.layers, id)?;
        self.remove_tree(&self.layer_dir(id))
    }

    fn derive_layer(
        &self,
        chain: &[LayerRecord],
        plan: &crate::derive::CleanupPlan,
        id: &str,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<LayerRecord> {
        let top = chain.first().ok_or_else(|| Error::Backend {
            path: self.layers.clone(),
            message: "derive from an empty chain".into(),
        })?;
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        if top.depth + 1 > self.max_depth {
            // Too deep to stack one more layer: a complete one, folded and edited in place.
            self.durability.mark_unsynced();
            // No listing: the layer is clean for this cleanup, and a derive with another one
            // walks it once if it ever needs it.
            self.fold_into(chain, &tmp, over_base, base)?;
            let whiteouts = crate::backend::apply::Whiteouts::of(over_base, base, self.opaque);
            crate::backend::apply::edit_in_place(&tmp, plan, whiteouts, &|p| self.remove_tree(p))?;
            failpoint::hit("derive:after-copy");
            self.publish(id)?;
            return Ok(LayerRecord::new(id, None, 1));
        }
        // The layer holds no file data (empty files, whiteouts, directories): like a
        // commit's layer, it is metadata made durable with the node that names it.
        let scratch = self.scratch(id);
        self.remove_tree(&scratch)?;
        fs_err::create_dir_all(&scratch)?;
        let written = self.write_edits(plan, &scratch, &tmp);
        self.remove_tree(&scratch)?;
        let paths = written?;
        failpoint::hit("derive:after-copy");
        self.publish(id)?;
        Listing::new(Some(top.id.clone()), paths.iter().map(PathBuf::as_path))
            .write(&self.layers, id)?;
        Ok(LayerRecord::new(id, Some(top.id.clone()), top.depth + 1))
    }

    fn flatten_layer(
        &self,
        chain: &[LayerRecord],
        id: &str,
        over_base: bool,
        base: Option<&crate::backend::BoxBase>,
    ) -> Result<LayerRecord> {
        self.durability.mark_unsynced();
        let tmp = self.tmp_layer(id);
        self.remove_tree(&tmp)?;
        let paths = self.fold_into(chain, &tmp, over_base, base)?;
        failpoint::hit("flatten:after-copy");
        self.publish(id)?;
        if let Some(paths) = paths {
            Listing::new(None, paths.iter().map(PathBuf::as_path)).write(&self.layers, id)?;
        }
        Ok(LayerRecord::new(id, None, 1))
    }
}
