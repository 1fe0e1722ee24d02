//! The copier: copies of the upper directory's files made while the command runs, each
//! exact as of the metadata read before and after it (see the module documentation).

use super::*;

impl Prestage {
    /// Copy the upper directory's file `rel` into the area, recording `seq` (the caller's
    /// event number before this call: see the module documentation) with it. A copy made
    /// earlier of the same path is replaced.
    pub fn stage(&mut self, rel: &Path, seq: u64) -> Result<Staged> {
        let Some(area) = &self.area else {
            return Ok(Staged::Skipped);
        };
        if rel.as_os_str().is_empty() || rel.is_absolute() {
            return Ok(Staged::Skipped);
        }
        // Box-controlled: never through a directory it swapped for a symlink.
        let Ok(mut meta) = read_meta_beneath(&self.upper, rel) else {
            return Ok(Staged::Skipped);
        };
        if meta.kind == Kind::Dir {
            return Ok(Staged::Directory);
        }
        if meta.kind != Kind::File || meta.nlink != 1 {
            return Ok(Staged::Skipped);
        }
        if !settled(&meta) {
            return Ok(Staged::TooNew);
        }
        strip_overlay_xattrs(&mut meta);
        if let Some(old) = self.copies.remove(rel) {
            self.bytes -= old.bytes;
            let _ = remove_beneath(&area.path, &old.name, false);
        }
        let in_place = area.snapshot_of.is_some();
        // In place: the copy is created through its directory's descriptor, opened beneath
        // the area without following any symlink (HEAD's layer holds the box's symlinks).
        let mut parent_fd = None;
        let (name, dst) = if in_place {
            let area_path = area.path.clone();
            let Some(parent) =
                self.dir_in_place(&area_path, rel.parent().unwrap_or(Path::new("")))?
            else {
                return Ok(Staged::Skipped);
            };
            let Some(file) = rel.file_name() else {
                return Ok(Staged::Skipped);
            };
            match rustix::fs::statat(&parent, file, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                Err(rustix::io::Errno::NOENT) => {}
                // A directory of HEAD's layer: left to the commit.
                Ok(st)
                    if rustix::fs::FileType::from_raw_mode(st.st_mode)
                        == rustix::fs::FileType::Directory =>
                {
                    return Ok(Staged::Skipped)
                }
                // Another entry of HEAD's layer: set aside, to be put back if the commit
                // does not replace it.
                Ok(_) => {
                    if !self.set_aside(&area_path, rel, &parent, file)? {
                        return Ok(Staged::Skipped);
                    }
                }
                Err(_) => return Ok(Staged::Skipped),
            }
            let dst = Path::new("/proc/self/fd")
                .join(rustix::fd::AsRawFd::as_raw_fd(&parent).to_string())
                .join(file);
            parent_fd = Some(parent);
            (rel.to_owned(), dst)
        } else {
            let name = PathBuf::from(self.next.to_string());
            self.next += 1;
            let dst = area.path.join(&name);
            (name, dst)
        };
        let entry = Entry {
            rel: rel.to_owned(),
            src: self.upper.join(rel),
            meta: meta.clone(),
        };
        // The options of a commit's copy (an owner that cannot be set is no copy at all).
        let opts = CopyOpts {
            reflink: true,
            beneath: Some(self.upper.clone()),
            ..CopyOpts::default()
        };
        if copy_entry(&entry, &dst, &opts).is_err() {
            let _ = fs_err::remove_file(&dst);
            return Ok(Staged::Skipped);
        }
        let same = read_meta_beneath(&self.upper, rel).is_ok_and(|mut after| {
            strip_overlay_xattrs(&mut after);
            after == meta
        });
        if !same {
            let _ = fs_err::remove_file(&dst);
            return Ok(Staged::Skipped);
        }
        let bytes = meta.size;
        self.bytes += bytes;
        // A plain area's copies go into a layer that the commit writes out (a snapshot's
        // are made durable by the transaction that seals it): started now, waited for
        // later ([`Prestage::write_out`]), so the commit finds them on the device.
        if !in_place
            && fs_err::File::open(&dst).is_ok_and(|f| agentbox_sys::writeback::start(&f).is_ok())
        {
            self.unwritten.push(rel.to_owned());
        }
        drop(parent_fd);
        self.copies.insert(
            rel.to_owned(),
            Copy {
                name,
                meta,
                seq,
                bytes,
                written: false,
            },
        );
        Ok(Staged::Copied(bytes))
    }

    /// Wait until the data of the copies made so far reached the device (their writeback
    /// was started when they were made): a commit then need not write them out. Returns
    /// how many were waited for.
    pub fn write_out(&mut self) -> usize {
        let Some(area) = &self.area else {
            return 0;
        };
        let mut done = 0;
        for rel in std::mem::take(&mut self.unwritten) {
            let Some(copy) = self.copies.get_mut(&rel) else {
                continue;
            };
            let path = area.path.join(&copy.name);
            if fs_err::File::open(&path).is_ok_and(|f| agentbox_sys::writeback::wait(&f).is_ok()) {
                copy.written = true;
                done += 1;
            }
        }
        done
    }

    /// In place: directory `dir` of the area (relative), opened beneath it without
    /// following any symlink, made (with its missing parents) when HEAD's layer lacks it;
    /// `None` when a symlink or a non-directory of that layer is on the way. The times of
    /// the layer's directories that get an entry are recorded first.
    fn dir_in_place(&mut self, root: &Path, dir: &Path) -> Result<Option<rustix::fd::OwnedFd>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let io = |e: rustix::io::Errno| Error::Io(crate::store::io_at(root, e.into()));
        let mut fd = rustix::fs::open(root, flags, Mode::empty()).map_err(io)?;
        let mut at = PathBuf::new();
        for part in dir.components() {
            let std::path::Component::Normal(name) = part else {
                return Ok(None);
            };
            match rustix::fs::openat(&fd, name, flags, Mode::empty()) {
                Ok(next) => fd = next,
                Err(rustix::io::Errno::NOENT) => {
                    self.touch(&at, &fd);
                    rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o700)).map_err(io)?;
                    self.made.push(at.join(name));
                    fd = rustix::fs::openat(&fd, name, flags, Mode::empty()).map_err(io)?;
                }
                Err(_) => return Ok(None),
            }
            at.push(name);
        }
        self.touch(&at, &fd);
        Ok(Some(fd))
    }

    /// Record the time of directory `at` (open as `fd`) of HEAD's layer before its first
    /// change (nothing for a directory made here).
    fn touch(&mut self, at: &Path, fd: &rustix::fd::OwnedFd) {
        if self.touched.contains_key(at) || self.made.iter().any(|m| m == at) {
            return;
        }
        if let Ok(st) = rustix::fs::statat(fd, "", rustix::fs::AtFlags::EMPTY_PATH) {
            self.touched
                .insert(at.to_owned(), (st.st_mtime, st.st_mtime_nsec as i64));
        }
    }

    /// In place: move the entry `file` of HEAD's layer at `rel` (in directory `parent`)
    /// into the area's directory of set-aside entries (made at its root when first
    /// needed), so a copy can take its place; whether it was moved.
    fn set_aside(
        &mut self,
        root: &Path,
        rel: &Path,
        parent: &rustix::fd::OwnedFd,
        file: &std::ffi::OsStr,
    ) -> Result<bool> {
        use rustix::fs::{Mode, OFlags};
        if self.aside.contains_key(rel) {
            // Set aside before; what is there is a stranger's (cannot be: only copies).
            return Ok(false);
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let io = |e: rustix::io::Errno| Error::Io(crate::store::io_at(root, e.into()));
        let root_fd = rustix::fs::open(root, flags, Mode::empty()).map_err(io)?;
        let dir = PathBuf::from(&self.aside_dir);
        if self.aside.is_empty() {
            self.touch(Path::new(""), &root_fd);
            match rustix::fs::mkdirat(&root_fd, &dir, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                // Not ours (HEAD's layer holds the name): nothing is set aside.
                Err(_) => return Ok(false),
            }
        }
        let dir_fd = rustix::fs::openat(&root_fd, &dir, flags, Mode::empty()).map_err(io)?;
        let name = self.next.to_string();
        self.next += 1;
        rustix::fs::renameat(parent, file, &dir_fd, name.as_str()).map_err(io)?;
        self.aside.insert(rel.to_owned(), dir.join(name));
        Ok(true)
    }

    /// The regular files below directory `rel` of the upper directory (relative to it),
    /// listed beneath it without following any symlink. A directory that cannot be read
    /// (gone, swapped for a symlink) lists nothing.
    pub fn files_below(&self, rel: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![rel.to_owned()];
        while let Some(dir) = todo.pop() {
            let Ok(fd) = crate::fsops::scan::open_dir_beneath(&self.upper, &dir) else {
                continue;
            };
            // `O_PATH` descriptors cannot be listed: reopen the directory itself.
            let Ok(fd) = rustix::fs::openat(
                &fd,
                ".",
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            ) else {
                continue;
            };
            let Ok(mut entries) = rustix::fs::Dir::read_from(&fd) else {
                continue;
            };
            while let Some(Ok(e)) = entries.next() {
                let name = e.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let child =
                    dir.join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name));
                match e.file_type() {
                    rustix::fs::FileType::Directory => todo.push(child),
                    rustix::fs::FileType::RegularFile => out.push(child),
                    _ => {}
                }
            }
        }
        out
    }
}

/// Whether `meta`'s change time is at least [`SETTLED`] old.
fn settled(meta: &Meta) -> bool {
    let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
        return false;
    };
    let (Ok(sec), Ok(nsec)) = (
        u64::try_from(meta.ctime_sec),
        u32::try_from(meta.ctime_nsec),
    ) else {
        return false;
    };
    Duration::new(sec, nsec)
        .checked_add(SETTLED)
        .is_some_and(|ready| ready <= now)
}
