//! Intent markers: what lets opening a store skip the full reconcile pass.
//!
//! Whoever takes the store lock (shared or exclusive) creates `inflight/<pid>-<random>`,
//! durable before anything it writes is (see [`StoreLock::marked`]), and removes it when it
//! releases the lock. An operation that dies half-way therefore leaves its marker behind,
//! and only then can the store hold anything half-made (see [`crate::leftovers`]). Opening a store looks at
//! `inflight/` (one directory read of a handful of entries, whatever the number of nodes)
//! and runs the full pass of [`crate::Store::reconcile`] — which reads every node — only
//! when a marker is left, or when the store still has to be migrated to the current format.
//!
//! A marker of a live operation is never removed by someone else: markers are cleared only
//! by a holder of the exclusive store lock (nobody else holds it), and never its own.
//! Removing a marker is not made durable: a marker that comes back after a power loss
//! costs one needless full pass, nothing else.

use std::path::PathBuf;

use agentbox_core::atomic;
use agentbox_core::lock::FileLock;

use crate::layout::Layout;
use crate::Result;

/// The store lock plus this holder's intent marker; both go on drop.
#[derive(Debug)]
pub struct StoreLock {
    _lock: FileLock,
    marker: Option<PathBuf>,
    /// The marker's directory while the marker's creation may not be durable yet (see
    /// [`StoreLock::marked`]).
    unsettled: Option<PathBuf>,
}

impl StoreLock {
    /// Take `lock` as an operation that may write: record the intent marker first. Its
    /// creation is not made durable yet: the holder must call [`StoreLock::settle`] before
    /// it makes anything durable, unless the first thing it makes durable is a step that
    /// commits the whole filesystem's transaction (a btrfs snapshot), which carries the
    /// marker with it ([`StoreLock::carried`]).
    ///
    /// Why that is enough: until then the holder writes only unsynced files. They can
    /// reach the disk early only through a transaction commit, which carries the marker
    /// (made before them) too, or through another process's `fsync` of a directory they
    /// share; that process's own marker, durable and removed without a flush, then comes
    /// back after a power loss unless a later sync carried the removal, and any such sync
    /// carries this marker as well. Either way a marker survives, and the full reconcile
    /// pass runs.
    pub(crate) fn marked(layout: &Layout, lock: FileLock) -> Result<StoreLock> {
        let dir = layout.inflight();
        if !dir.is_dir() {
            // A store made before markers existed.
            fs_err::create_dir_all(&dir)?;
            atomic::sync_dir(layout.root())?;
        }
        let marker = dir.join(format!(
            "{}-{}",
            std::process::id(),
            agentbox_core::id::new_id()
        ));
        fs_err::File::create(&marker)?;
        // The marker must be on disk before anything it stands for. Where the journal
        // commits metadata in order (ext4, xfs), whatever the operation later makes durable
        // carries the marker's creation with it, so it costs no flush of its own.
        let unsettled = (!crate::backend::journal_orders_metadata(&dir)).then_some(dir);
        Ok(StoreLock {
            _lock: lock,
            marker: Some(marker),
            unsettled,
        })
    }

    /// Make the marker's creation durable, if it is not yet.
    pub(crate) fn settle(&mut self) -> Result<()> {
        if let Some(dir) = &self.unsettled {
            atomic::sync_dir(dir)?;
            self.unsettled = None;
        }
        Ok(())
    }

    /// A commit of the filesystem's whole transaction, made after the marker was created,
    /// has returned: the marker is durable (see [`StoreLock::marked`]).
    pub(crate) fn carried(&mut self) {
        self.unsettled = None;
    }

    /// Take `lock` without a marker: for the reconcile pass itself, which leaves the
    /// markers in place until it has finished (so a pass that dies is run again).
    pub(crate) fn unmarked(lock: FileLock) -> StoreLock {
        StoreLock {
            _lock: lock,
            marker: None,
            unsettled: None,
        }
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if let Some(m) = &self.marker {
            // Best effort by design (see the module docs): a marker left costs one full pass.
            let _ = std::fs::remove_file(m);
        }
    }
}

/// Markers of earlier operations, not this process's own.
pub(crate) fn left(layout: &Layout) -> Result<Vec<PathBuf>> {
    let dir = layout.inflight();
    let mine = format!("{}-", std::process::id());
    let mut out = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|e| crate::store::io_at(&dir, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with(&mine) {
                    out.push(entry.path());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(crate::Error::Io(crate::store::io_at(&dir, e))),
    }
    Ok(out)
}

/// Remove markers `left` by operations that are over (exclusive store lock held).
pub(crate) fn clear(markers: &[PathBuf]) -> Result<()> {
    for m in markers {
        match std::fs::remove_file(m) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(crate::Error::Io(crate::store::io_at(m, e))),
        }
    }
    Ok(())
}
