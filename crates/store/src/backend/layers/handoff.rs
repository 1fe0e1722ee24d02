//! Handing the upper directory to a commit's new layer (rename, no copy) when nothing holds
//! the working tree open, and what makes that crash-safe: the `work/handoff.json` record,
//! finishing the handoff after the commit point and giving the files back before it.

use super::*;

/// `work/handoff.json`: a commit is handing the upper directory to layer `layer` (renamed
/// to be it; earlier versions hard-linked its entries, so the two shared their inodes).
/// While it exists the working files may live under the layer's name, and the upper
/// directory must not be mounted as it is. [`LayersBackend::finish_handoff`] (after the
/// commit point, or at the next mount when HEAD is that layer) mounts a fresh upper
/// directory over `lowers`; [`LayersBackend::give_back`] (a commit that fails or was
/// interrupted before its commit point) moves the working files back.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Handoff {
    pub(super) layer: String,
    /// The new chain's layer directories, top first.
    lowers: Vec<PathBuf>,
    /// Names in the directory under the mount point right after the unmount. Anything
    /// else found there at the remount was written through the mount point while it was
    /// unmounted: it is moved into the new working tree rather than left hidden under it.
    #[serde(default)]
    under: Vec<PathBuf>,
}

impl LayersBackend {
    pub(super) fn handoff_path(dirs: &WorkDirs) -> PathBuf {
        dirs.work.join("handoff.json")
    }

    pub(super) fn load_handoff(dirs: &WorkDirs) -> Result<Option<Handoff>> {
        Ok(read_json_opt(&Self::handoff_path(dirs))?)
    }

    /// Commit by handing the working files to the new layer instead of copying them, when
    /// nothing uses the working tree: the overlay is unmounted (which the kernel refuses,
    /// `EBUSY`, while any process has a file, a directory or a mapping open in it), the
    /// upper directory is renamed to be the new layer, and once the commit point has passed
    /// a fresh, empty upper directory is mounted over the new chain
    /// ([`Backend::committed`]). No byte of data is copied and no directory made, so each
    /// file is kept once on disk and the next commit looks only at what changed since this
    /// one.
    ///
    /// The unmount neither syncs the filesystem nor frees the overlay's cached inodes (10 ms
    /// and more once a large tree was walked): a detached clone of the mount taken just
    /// before keeps its superblock alive, and a background process lets go of it
    /// ([`agentbox_sys::release::close_in_background`]). The changed files' data is written
    /// out here instead, without a device flush of its own (see [`crate::backend::write_out`]).
    ///
    /// When a process holds anything open in the working tree, `None`: the caller copies
    /// the changes instead, as before, and the mount is left alone. Correctness rests on
    /// that refusal: an open file written after the commit must not change the committed
    /// layer, and with the overlay unmounted no such file exists (the clone is ours alone
    /// and is never used). For the few milliseconds between unmount and remount the mount
    /// point shows the directory under it: a process that starts using the mount point
    /// then sees it empty, and what it writes there is moved into the new working tree at
    /// the remount.
    ///
    /// Crash safety: the marker `work/handoff.json` is durable before the rename (see
    /// [`Handoff`]). Until the commit point the working files live under the layer's name:
    /// a commit that fails gives them back ([`Backend::abandon`]), and after a crash the
    /// store's recovery does ([`crate::Store::reconcile`], before it removes unfinished
    /// layers); after the commit point HEAD's layer holds them and the next mount just
    /// makes a fresh upper directory.
    pub(super) fn try_handoff(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<Option<(NewMarks, Vec<PathBuf>)>> {
        let Some(mountpoint) = &dirs.mountpoint else {
            return if dirs.box_stopped {
                self.hand_over_stopped_box(dirs, chain, id)
            } else {
                Ok(None)
            };
        };
        let mut timer = agentbox_core::timing::Timer::start("handoff");
        // The unmount below is refused only while *this* mount is in use, but the same
        // overlay may be mounted elsewhere too (a container's volume of the directory, a
        // bind mount in another namespace): a write through such a mount after the
        // handoff would change the committed layer. Then the changes are copied instead,
        // and that mount keeps working on the live tree.
        let dev = std::os::unix::fs::MetadataExt::dev(&fs_err::metadata(mountpoint)?);
        if crate::mounts::mounted_elsewhere(mountpoint, dev) {
            return Ok(None);
        }
        timer.lap("other mounts");
        // Not having the clone (no permission, an old kernel) only makes the unmount slow.
        let held = rustix::mount::open_tree(
            rustix::fs::CWD,
            mountpoint,
            rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
                | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .ok();
        // The upper directories of earlier handoffs go meanwhile, on another thread.
        let trash = Self::trash_dirs(dirs)?;
        let unmounted = std::thread::scope(|s| {
            let removal = s.spawn(|| trash.iter().try_for_each(|t| self.remove_tree(t)));
            let unmounted = rustix::mount::unmount(mountpoint, UnmountFlags::empty());
            let removed = removal
                .join()
                .expect("removing a directory only returns errors, never panics");
            removed.map(|()| unmounted)
        })?;
        match unmounted {
            Ok(()) => {}
            // The clone goes with the mount still in place: its close is cheap.
            Err(rustix::io::Errno::BUSY) => return Ok(None),
            Err(e) => return Err(Error::Io(io_at(mountpoint, e.into()))),
        }
        if let Some(fd) = held {
            // A failed fork has closed it already, only slowly.
            let _ = agentbox_sys::release::close_in_background(fd);
        }
        if crate::mounts::is_our_overlay(mountpoint) {
            // Stacked overlays (left by an interrupted earlier run): put the one taken off
            // back and copy instead.
            self.mount_overlay(dirs, chain)?;
            return Ok(None);
        }
        timer.lap("unmount");
        failpoint::hit("commit:after-unmount");
        let handed = self.hand_over_upper(dirs, chain, id);
        timer.lap("hand over");
        let Err(e) = handed else {
            return handed.map(Some);
        };
        // Back to the state before the commit: the upper directory mounted as it was.
        let renamed = !Self::upper(dirs).exists();
        self.give_back(dirs, id)?;
        let marker = Self::handoff_path(dirs);
        if marker.exists() {
            fs_err::remove_file(&marker)?;
        }
        self.mount_overlay(dirs, chain)?;
        if renamed {
            Err(e)
        } else {
            // The upper directory could not become the layer (another filesystem, say):
            // the changes are copied instead.
            Ok(None)
        }
    }

    /// [`Self::try_handoff`] for a box its supervisor stopped for the commit
    /// ([`WorkDirs::box_stopped`]): no process of the box is left, so its overlay (mounted
    /// only in the box's own mount namespace, which died with its last process) can no
    /// longer write to the upper directory, and no unmount is needed. The same marker makes
    /// it crash-safe; the box's next start finishes it or gives the files back
    /// ([`Self::settle_box_handoff`]).
    fn hand_over_stopped_box(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<Option<(NewMarks, Vec<PathBuf>)>> {
        let mut timer = agentbox_core::timing::Timer::start("handoff (stopped box)");
        // A change check's scan kept for this commit is of the directory about to become
        // the layer: no later commit may take it.
        super::capture::forget_kept_scan();
        let handed = self.hand_over_upper(dirs, chain, id);
        timer.lap("hand over");
        let Err(e) = handed else {
            return handed.map(Some);
        };
        let renamed = !Self::upper(dirs).exists();
        self.give_back(dirs, id)?;
        let marker = Self::handoff_path(dirs);
        if marker.exists() {
            fs_err::remove_file(&marker)?;
        }
        if renamed {
            Err(e)
        } else {
            // The upper directory could not become the layer: the changes are copied.
            Ok(None)
        }
    }

    /// Before a box's layers are mounted: finish a handoff whose node is HEAD (a fresh
    /// upper directory over it), or give back the files of one whose commit never
    /// happened, as [`Backend::mount`] does for a mounted environment.
    pub(super) fn settle_box_handoff(&self, dirs: &WorkDirs, chain: &[LayerRecord]) -> Result<()> {
        let Some(h) = Self::load_handoff(dirs)? else {
            return Ok(());
        };
        if chain.first().is_some_and(|top| top.id == h.layer) {
            return self.finish_handoff(dirs, &h);
        }
        // Never committed (HEAD did not move to it): the working files go back to the upper
        // directory from wherever the rename left them, even from a published layer no
        // node names (recovery removes its record), rather than be mounted over empty.
        self.give_back(dirs, &h.layer)?;
        fs_err::remove_file(Self::handoff_path(dirs))?;
        Ok(())
    }

    /// The handoff's layer: the upper directory renamed to `tmp_layer(id)`, its
    /// directories cleared of the overlay's bookkeeping attributes and its files' data
    /// written out (see [`Self::try_handoff`]).
    pub(super) fn hand_over_upper(
        &self,
        dirs: &WorkDirs,
        chain: &[LayerRecord],
        id: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let mut lowers = vec![self.layer_dir(id)];
        lowers.extend(self.chain_dirs(chain));
        let marker = Self::handoff_path(dirs);
        write_json_unsynced(
            &marker,
            &Handoff {
                layer: id.to_owned(),
                lowers,
                under: match &dirs.mountpoint {
                    Some(mp) => names_in(mp)?,
                    None => Vec::new(),
                },
            },
        )?;
        // Durable before the rename (on ext4/xfs by journal order).
        crate::backend::fsync_with_dirs(std::slice::from_ref(&marker))?;
        failpoint::hit("commit:after-handoff-marker");
        let dst = self.tmp_layer(id);
        self.remove_tree(&dst)?;
        fs_err::rename(Self::upper(dirs), &dst)?;
        failpoint::hit("commit:after-handover");
        let mut paths = Vec::new();
        let mut files = Vec::new();
        for entry in walkdir::WalkDir::new(&dst).follow_links(false) {
            let entry = entry.map_err(|e| {
                let path = e.path().unwrap_or(&dst).to_owned();
                Error::Io(io_at(&path, e.into()))
            })?;
            let rel = entry
                .path()
                .strip_prefix(&dst)
                .expect("walkdir yields paths below its root")
                .to_owned();
            let ft = entry.file_type();
            if ft.is_dir() && rel.as_os_str().is_empty() {
                // The root loses every overlay attribute: an opaque root would hide the
                // whole chain below it.
                strip_overlay_xattrs_at(entry.path())?;
            } else if ft.is_dir() {
                // Of the other directories' overlay attributes, a lower layer's are read
                // only for the opaque marker (which must stay); `origin` stays too. But
                // `impure` goes: overlayfs adds it after `origin`, and on ext4 the two no
                // longer fit in a 256-byte inode, so it holds a 4 KiB attribute block per
                // directory of every layer (6 MiB over 10 commits of 100 changes), which
                // its removal frees. One call, not a listing and one per attribute.
                match xattr::remove(entry.path(), IMPURE_XATTR) {
                    Ok(()) => {}
                    Err(e)
                        if e.raw_os_error() == Some(rustix::io::Errno::NODATA.raw_os_error()) => {}
                    Err(e) => return Err(Error::Io(io_at(entry.path(), e))),
                }
            } else if ft.is_file() {
                files.push(entry.path().to_owned());
            }
            if !rel.as_os_str().is_empty() {
                paths.push(rel);
            }
        }
        // Parents before children, siblings together (what a listing's readers like best).
        paths.sort();
        if crate::backend::journal_of(&dst) == crate::backend::Journal::Ordered {
            crate::backend::write_out(&files)?;
        } else {
            self.durability.mark_unsynced();
        }
        // The upper directory starts empty after the commit: nothing is captured yet.
        Ok((NewMarks::Whole(Captured::default()), paths))
    }

    /// Undo a handoff whose commit point was not reached: the working files go back from
    /// the layer's name (temporary or published) to the upper directory. Nothing to do
    /// when the upper directory is still there (the rename never happened, or the handoff
    /// was made by linking, as earlier versions did). The marker stays for the next mount,
    /// which moves in what was written at the mount point meanwhile and removes it.
    pub(super) fn give_back(&self, dirs: &WorkDirs, id: &str) -> Result<()> {
        let upper = Self::upper(dirs);
        if !upper.exists() {
            for held in [self.tmp_layer(id), self.layer_dir(id)] {
                if held.exists() {
                    fs_err::rename(&held, &upper)?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// After the handoff's commit point (or at the next mount): discard the upper
    /// directory, whose entries the handoff's layer holds, and mount a fresh one over the
    /// new chain.
    pub(super) fn finish_handoff(&self, dirs: &WorkDirs, h: &Handoff) -> Result<()> {
        let mut timer = agentbox_core::timing::Timer::start("handoff");
        let upper = Self::upper(dirs);
        if upper.exists() {
            // Removed by the next handoff (or with the work area): only names of inodes
            // the layer keeps, and a commit need not wait for them.
            let trash = dirs
                .work
                .join(format!("{TRASH_PREFIX}{}", agentbox_core::id::new_id()));
            fs_err::rename(&upper, &trash)?;
        }
        self.remove_tree(&Self::ovl(dirs))?;
        fs_err::create_dir_all(Self::ovl(dirs))?;
        let top = h.lowers.first().ok_or_else(|| Error::Corrupt {
            path: Self::handoff_path(dirs),
            message: "a handoff without layers".into(),
        })?;
        Self::fresh_upper_from(dirs, top)?;
        self.adopt_strays(dirs, h)?;
        // Marks of the old upper directory mean nothing for the new one.
        let _ = marks::discard(dirs);
        fs_err::remove_file(Self::handoff_path(dirs))?;
        timer.lap("fresh upper");
        self.mount_lowers(dirs, &h.lowers)?;
        timer.lap("mount");
        Ok(())
    }

    /// Move into the upper directory what was written under the unmounted mount point
    /// during a handoff (see [`Handoff::under`]), so that the mount does not hide it.
    pub(super) fn adopt_strays(&self, dirs: &WorkDirs, h: &Handoff) -> Result<()> {
        let Some(mp) = &dirs.mountpoint else {
            return Ok(());
        };
        let upper = Self::upper(dirs);
        for name in names_in(mp)? {
            if h.under.contains(&name) {
                continue;
            }
            let stray = mp.join(&name);
            let mut tree = scan_tree(&stray)?;
            // A plain directory: overlay attributes there mean nothing.
            for e in tree.entries.values_mut() {
                strip_overlay_xattrs(&mut e.meta);
            }
            let dst = upper.join(&name);
            self.remove_tree(&dst)?;
            copy_tree(&tree, &dst, &copy_opts())?;
            self.remove_tree(&stray)?;
        }
        Ok(())
    }

    /// Old upper directories left by [`Self::finish_handoff`].
    pub(super) fn trash_dirs(dirs: &WorkDirs) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in fs_err::read_dir(&dirs.work)? {
            let entry = entry?;
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(TRASH_PREFIX)
            {
                out.push(entry.path());
            }
        }
        Ok(out)
    }
}
