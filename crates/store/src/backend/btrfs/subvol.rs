//! Subvolume and metadata helpers of the btrfs backend: errors, making and removing
//! subvolumes, a root's metadata.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use agentbox_sys::btrfs;
use rustix::fs::{Gid, Mode, Timespec, Timestamps, Uid};

use crate::{Error, Result};

pub(super) fn sys(e: btrfs::Error) -> Error {
    Error::Io(e.into())
}

pub(super) fn io_at(path: &Path, op: &str, e: impl std::fmt::Display) -> Error {
    Error::Backend {
        path: path.to_owned(),
        message: format!("{op}: {e}"),
    }
}

pub(super) fn fsync_dir(dir: &Path) -> Result<()> {
    fs_err::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Create `path` as a new subvolume (its parent must exist on btrfs).
pub(super) fn make_subvolume(path: &Path) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "a subvolume needs a name")
    })?;
    btrfs::create_subvolume(parent, name)?;
    Ok(())
}

/// Delete whatever is at `path`: a subvolume, a directory tree or a file. Missing is fine.
pub(crate) fn remove_any(path: &Path) -> Result<()> {
    let md = match fs_err::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if md.is_dir() {
        if btrfs::is_subvolume(path)? {
            btrfs::delete_subvolume(path).map_err(sys)
        } else {
            Ok(fs_err::remove_dir_all(path)?)
        }
    } else {
        Ok(fs_err::remove_file(path)?)
    }
}

/// Give `dst` the metadata of `src`'s root: xattrs, owner, full mode, mtime (in that order:
/// chown clears setuid/setgid bits, and every change bumps the times).
pub(super) fn copy_root_meta(src: &Path, dst: &Path) -> Result<()> {
    let md = fs_err::symlink_metadata(src)?;
    for name in xattr::list(src).map_err(|e| io_at(src, "list xattrs", e))? {
        let value = xattr::get(src, &name)
            .map_err(|e| io_at(src, &format!("read xattr {name:?}"), e))?
            .unwrap_or_default();
        xattr::set(dst, &name, &value)
            .map_err(|e| io_at(dst, &format!("set xattr {name:?}"), e))?;
    }
    rustix::fs::chown(
        dst,
        Some(Uid::from_raw(md.uid())),
        Some(Gid::from_raw(md.gid())),
    )
    .map_err(|e| io_at(dst, "chown", std::io::Error::from(e)))?;
    rustix::fs::chmod(dst, Mode::from_raw_mode(md.mode() & 0o7777))
        .map_err(|e| io_at(dst, "chmod", std::io::Error::from(e)))?;
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: md.atime(),
            tv_nsec: md.atime_nsec() as _,
        },
        last_modification: Timespec {
            tv_sec: md.mtime(),
            tv_nsec: md.mtime_nsec() as _,
        },
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        dst,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| io_at(dst, "set times", std::io::Error::from(e)))?;
    Ok(())
}
