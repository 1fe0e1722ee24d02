//! Disk limits of a box: what its writable state (the overlay's upper and work directories,
//! `envs/<name>/work/`) may hold, enforced by the store's filesystem.
//!
//! * `btrfs` backend: a box's work area is a subvolume of its own (see
//!   `backend::btrfs`), and its qgroup gets a limit on its exclusive bytes. Quotas are
//!   enabled on the filesystem the first time a limit is set (btrfs then accounts every
//!   subvolume: a cost on snapshot deletion, so it is not done for stores without limits).
//! * `layers` backend on ext4/xfs with project quotas: the work area gets a project id of
//!   its own with `PROJINHERIT` (everything the box creates below it inherits the id) and
//!   the project a block limit. A filesystem that does not enforce project quotas refuses
//!   the limit with [`Error::DiskLimit`], saying what it lacks: the store never pretends.
//!
//! Invariants: the limit is recorded in the environment's state ([`DiskLimit`]) and
//! applied again whenever the work area is made anew (a checkout discards it), before the
//! box can write to it. Committed layers are outside the work area and never charged. A
//! box cannot lift its limit: changing a project id or a qgroup needs `CAP_SYS_ADMIN` in
//! the initial user namespace, and a rename or hard link into a `PROJINHERIT` directory of
//! another project fails (`EXDEV`). Writes past the limit fail with `EDQUOT` ("Disk quota
//! exceeded"), the store's filesystem keeps its free space, and the box keeps working.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use agentbox_sys::quota;
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::{Error, Result};

/// The disk limit of one environment's work area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskLimit {
    /// Most bytes the work area may hold.
    pub bytes: u64,
    /// The project id of the work area (`layers` backend; 0 on btrfs, where the subvolume
    /// is the unit).
    #[serde(default)]
    pub project: u32,
}

/// What a limited work area holds, against its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DiskUsage {
    /// Bytes charged to the limit; `None` where the filesystem does not say cheaply
    /// (btrfs: reading a qgroup's counters needs a search of the quota tree).
    pub used: Option<u64>,
    pub limit: u64,
}

/// Project ids of boxes start here, above the ids administrators number by hand.
const FIRST_PROJECT: u32 = 0x4000_0000;

/// A project id for environment `env` of the store at `store_dir` that none of `taken`
/// uses: derived from both (stable across runs), then the next free one.
pub(crate) fn project_for(store_dir: &Path, env: &str, taken: &[u32]) -> u32 {
    let mut h = blake3::Hasher::new();
    h.update(store_dir.as_os_str().as_encoded_bytes());
    h.update(b"\0");
    h.update(env.as_bytes());
    let b = h.finalize();
    let bytes = b.as_bytes();
    let mut id = FIRST_PROJECT
        | (u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) & (FIRST_PROJECT - 1));
    while taken.contains(&id) {
        id = FIRST_PROJECT | (id.wrapping_add(1) & (FIRST_PROJECT - 1));
    }
    id
}

fn open(path: &Path) -> Result<File> {
    Ok(fs_err::File::open(path)?.into_parts().0)
}

fn fail(path: &Path, reason: impl Into<String>) -> Error {
    Error::DiskLimit {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Whether a store of `kind` at `store_dir` can limit a box's disk; the error says what the
/// filesystem lacks.
pub(crate) fn check(kind: BackendKind, store_dir: &Path) -> Result<()> {
    if !rustix::process::geteuid().is_root() {
        return Err(fail(
            store_dir,
            "a disk limit needs root (quotas are set with CAP_SYS_ADMIN); a rootless box has none",
        ));
    }
    match kind {
        BackendKind::Btrfs => Ok(()),
        BackendKind::Layers => {
            let on = quota::project_quotas_on(&open(store_dir)?)
                .map_err(|e| fail(store_dir, format!("asking for project quotas: {e}")))?;
            if on {
                Ok(())
            } else {
                Err(fail(
                    store_dir,
                    "the store's filesystem does not enforce project quotas (ext4: \
                     `tune2fs -O quota,project` and mount with `prjquota`; xfs: mount with \
                     `prjquota`; or keep the store on btrfs, whose qgroups agentbox uses)",
                ))
            }
        }
    }
}

/// Apply `limit` to the work area `work` of a box on a store of `kind` (see the module
/// documentation). Idempotent.
pub(crate) fn apply(kind: BackendKind, work: &Path, limit: &DiskLimit) -> Result<()> {
    match kind {
        BackendKind::Btrfs => {
            if !agentbox_sys::btrfs::is_subvolume(work)? {
                return Err(fail(
                    work,
                    "the box's work area predates disk limits (not a subvolume of its own); \
                     it becomes one at the box's next checkout",
                ));
            }
            let f = open(work)?;
            quota::btrfs_enable_quota(&f)
                .map_err(|e| fail(work, format!("enabling btrfs quotas: {e}")))?;
            quota::btrfs_limit_subvolume(&f, limit.bytes)
                .map_err(|e| fail(work, format!("setting the qgroup limit: {e}")))
        }
        BackendKind::Layers => {
            let root = open(work)?;
            let (id, inherit) = quota::project(&root)
                .map_err(|e| fail(work, format!("reading the project id: {e}")))?;
            // Whatever the work area holds already is charged too: every directory and
            // file gets the id (symlinks and special files, which take no data blocks and
            // cannot be opened for the ioctl, keep theirs). A work area that has it
            // already got it before anything was written below it, and kept it since.
            let walk = if id == limit.project && inherit {
                walkdir::WalkDir::new(work).max_depth(0)
            } else {
                walkdir::WalkDir::new(work)
            };
            for e in walk.follow_links(false) {
                let e = e.map_err(|e| fail(work, format!("walking the work area: {e}")))?;
                let ft = e.file_type();
                if !ft.is_dir() && !ft.is_file() {
                    continue;
                }
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                    .open(e.path())
                    .map_err(|err| fail(e.path(), format!("opening: {err}")))?;
                quota::set_project(&f, limit.project, ft.is_dir()).map_err(|err| {
                    fail(
                        e.path(),
                        format!("setting project id {}: {err}", limit.project),
                    )
                })?;
            }
            quota::set_project_limit(&root, limit.project, limit.bytes).map_err(|e| {
                fail(
                    work,
                    format!("setting the limit of project {}: {e}", limit.project),
                )
            })
        }
    }
}

/// What the work area `work` holds against `limit`.
pub(crate) fn usage(kind: BackendKind, work: &Path, limit: &DiskLimit) -> Result<DiskUsage> {
    let used = match kind {
        BackendKind::Btrfs => None,
        BackendKind::Layers => Some(
            quota::project_usage(&open(work)?, limit.project)
                .map_err(|e| fail(work, format!("reading project {}: {e}", limit.project)))?
                .0,
        ),
    };
    Ok(DiskUsage {
        used,
        limit: limit.bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_ids_are_stable_high_and_distinct() {
        let store = Path::new("/var/lib/agentbox/store");
        let a = project_for(store, "a", &[]);
        assert_eq!(a, project_for(store, "a", &[]));
        assert!(a >= FIRST_PROJECT);
        assert_ne!(a, project_for(store, "b", &[]));
        let next = project_for(store, "a", &[a]);
        assert_ne!(next, a);
        assert!(next >= FIRST_PROJECT);
    }
}
