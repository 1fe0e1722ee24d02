//! A box's commit on btrfs: HEAD's layer snapshotted (or the prestaged area taken in its
//! place), the box's changes applied over it, sealed.

use std::ffi::OsStr;
use std::path::PathBuf;

use agentbox_sys::btrfs;

use super::{sys, BtrfsBackend};
use crate::backend::layers::LayersBackend;
use crate::backend::{Backend, LayerRecord, WorkDirs};
use crate::listing::Listing;
use crate::Result;

impl BtrfsBackend {
    /// Commit of a box: a writable snapshot of HEAD's layer, plus what changed in the box's
    /// upper directory since the last commit (reflinked), sealed read-only. The running
    /// overlay keeps its lower (the layer it started on): the upper directory holds every
    /// change since then, so HEAD's layer plus the latest changes is exactly the box's tree.
    /// Overlay markers are kept literally: a box's layer sits on top of its base.
    pub(super) fn commit_box(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<LayerRecord> {
        let mut timer = agentbox_core::timing::Timer::start("btrfs commit");
        let top = self.top_layer(chain)?;
        let (layers, tmp_name) = self.prepare_layer(id)?;
        let tmp = layers.join(&tmp_name);
        // Copies of the box's files made while its command ran are in place in a writable
        // snapshot of HEAD's layer (see `crate::backend::prestage`): that snapshot becomes
        // this layer, and the copies that are exact stay.
        let prestaged = crate::backend::prestage::offered();
        let in_place = match (&prestaged, chain.first()) {
            (Some(p), Some(head)) => p.take_snapshot(&head.id, &tmp)?,
            _ => false,
        };
        if !in_place {
            btrfs::snapshot(&top, &layers, OsStr::new(&tmp_name), false).map_err(sys)?;
        }
        timer.lap("snapshot");
        // The applied changes are ordinary writes: they need the store's sync.
        self.durability.mark_unsynced();
        let opaque = self.opaque_xattr();
        // The changes go from the upper directory straight into the snapshot (reflinked),
        // not through a layer written out first: that was a second copy of every changed
        // file, a scan of it and its removal. A failure leaves only the temporary
        // snapshot, which the caller's abandon (or reconcile) removes.
        let planned = LayersBackend::plan_capture(dirs, opaque, &mut timer)?;
        let kept = match (&prestaged, in_place) {
            (Some(p), true) => {
                let kept = p.settle_in_place(&planned.tree, opaque)?;
                timer.lap(&format!("keep ({} files prestaged)", kept.len()));
                Some(kept)
            }
            _ => None,
        };
        crate::backend::apply::apply_overlay_tree(
            &planned.tree,
            &tmp,
            opaque,
            None,
            Some(&planned.upper),
            kept.as_ref(),
        )?;
        timer.lap("apply");
        if let Some(base) = &dirs.base {
            // The layer is the box's whole tree over its base: a whiteout in a directory
            // the base lacks hides nothing, and overlayfs would list its name there.
            crate::backend::apply::drop_idle_whiteouts(&planned.tree, &tmp, base, opaque)?;
        }
        timer.lap("whiteouts");
        LayersBackend::stage_marks(dirs, crate::backend::marks::NewMarks::Changes(planned.now))?;
        timer.lap("marks");
        let record = self.publish_layer(&layers, &tmp_name, id)?;
        timer.lap("publish");
        // The new layer is the previous one with exactly these paths changed.
        let base = chain.first().map(|l| l.id.clone());
        Listing::new(base, planned.tree.entries.keys().map(PathBuf::as_path)).write(&layers, id)?;
        Ok(record)
    }
}
