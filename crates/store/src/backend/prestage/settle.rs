//! Cleanup at a btrfs commit that took the area as its layer: the copies it does not take,
//! the directories made for them and the entries set aside go; times come back.

use super::*;

impl Prestaged {
    /// btrfs, once the snapshot is the commit's layer (at `root`) and its plan `tree` is
    /// made: keep the copies that are exactly the plan's files (valid, same metadata, no
    /// directory above them replaced by the plan: an opaque one is emptied when applied),
    /// remove every other copy and the directories made for copies that the plan does not
    /// hold, and give the layer's directories that the plan does not hold their times back.
    /// Returns the paths kept, which the apply leaves as they are.
    pub(crate) fn settle_in_place(
        &self,
        tree: &crate::fsops::Tree,
        opaque: &str,
    ) -> Result<std::collections::HashSet<PathBuf>> {
        let Some(root) = lock(&self.root).clone() else {
            return Ok(Default::default());
        };
        let replaced = |rel: &Path| {
            rel.ancestors().skip(1).any(|a| {
                tree.entries
                    .get(a)
                    .is_some_and(|e| crate::fsops::scan::is_opaque(&e.meta, opaque))
            })
        };
        let unplanned_dir = |rel: &Path| {
            rel.ancestors()
                .skip(1)
                .any(|a| self.made.iter().any(|m| m == a) && !tree.entries.contains_key(a))
        };
        let mut kept = std::collections::HashSet::new();
        for (rel, c) in std::mem::take(&mut *lock(&self.copies)) {
            let exact = c.valid
                && tree
                    .entries
                    .get(&rel)
                    .is_some_and(|e| e.meta.kind == Kind::File && e.meta == c.meta);
            if exact && !replaced(&rel) && !unplanned_dir(&rel) {
                kept.insert(rel);
            } else {
                remove_beneath(&root, &c.name, false)?;
            }
        }
        // What was set aside goes back where the plan leaves the path as HEAD's layer
        // had it; otherwise the copy or the plan's entry replaces it.
        for (rel, at) in &self.aside {
            if kept.contains(rel) || tree.entries.contains_key(rel) {
                remove_beneath(&root, at, false)?;
            } else {
                put_back(&root, at, rel)?;
            }
        }
        if !self.aside.is_empty() {
            remove_beneath(&root, &self.aside_dir, true)?;
        }
        for dir in self.made.iter().rev() {
            if !tree.entries.contains_key(dir) {
                remove_beneath(&root, dir, true)?;
            }
        }
        for (dir, (sec, nsec)) in &self.touched {
            if tree.entries.contains_key(dir) {
                continue;
            }
            let fd = crate::fsops::scan::open_dir_beneath(&root, dir)
                .map_err(|e| Error::Io(crate::store::io_at(&root.join(dir), e)))?;
            let proc =
                Path::new("/proc/self/fd").join(rustix::fd::AsRawFd::as_raw_fd(&fd).to_string());
            let dir_fd = rustix::fs::open(
                &proc,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| Error::Io(crate::store::io_at(&root.join(dir), e.into())))?;
            crate::bundle::fsutil::set_mtime_fd(&std::fs::File::from(dir_fd), *sec, *nsec)
                .map_err(|e| Error::Io(crate::store::io_at(&root.join(dir), e)))?;
        }
        self.taken.store(kept.len() as u64, Ordering::Relaxed);
        Ok(kept)
    }
}

/// Move the entry at `from` of the store's own tree `root` back to `to`, both directories
/// opened beneath `root` without following any symlink.
fn put_back(root: &Path, from: &Path, to: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::Io(crate::store::io_at(&root.join(to), e));
    let (Some(fp), Some(fname), Some(tp), Some(tname)) =
        (from.parent(), from.file_name(), to.parent(), to.file_name())
    else {
        return Ok(());
    };
    let from_dir = crate::fsops::scan::open_dir_beneath(root, fp).map_err(io)?;
    let to_dir = crate::fsops::scan::open_dir_beneath(root, tp).map_err(io)?;
    rustix::fs::renameat(&from_dir, fname, &to_dir, tname).map_err(|e| io(e.into()))
}

/// Remove `rel` (a file, or with `dir` an empty directory) of the store's own tree
/// `root`, through its directory opened beneath `root` without following any symlink.
pub(super) fn remove_beneath(root: &Path, rel: &Path, dir: bool) -> Result<()> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(());
    };
    let io = |e: std::io::Error| Error::Io(crate::store::io_at(&root.join(rel), e));
    let fd = crate::fsops::scan::open_dir_beneath(root, parent).map_err(io)?;
    let flags = if dir {
        rustix::fs::AtFlags::REMOVEDIR
    } else {
        rustix::fs::AtFlags::empty()
    };
    match rustix::fs::unlinkat(&fd, name, flags) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(io(e.into())),
    }
}
