//! Small filesystem helpers shared by the reader and the layer functions. None of them
//! follows a symlink at the final path component.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, SeekFrom, Timespec, Timestamps, CWD};

use crate::fsops::scan::read_xattrs;
use crate::fsops::{Kind, Meta};
use crate::Result;

/// The data segments `(offset, len)` of a file with holes, or `None` when the file is fully
/// allocated (or the filesystem cannot report holes).
pub(crate) fn data_segments(file: &File) -> io::Result<Option<Vec<(u64, u64)>>> {
    let md = file.metadata()?;
    let size = md.len();
    if size == 0 || md.blocks().saturating_mul(512) >= size {
        return Ok(None);
    }
    let mut segs = Vec::new();
    let mut off = 0u64;
    while off < size {
        let data = match rustix::fs::seek(file, SeekFrom::Data(off)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break,
            Err(rustix::io::Errno::INVAL) if off == 0 => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if data >= size {
            break;
        }
        let hole = rustix::fs::seek(file, SeekFrom::Hole(data))?.min(size);
        if hole <= data {
            break;
        }
        segs.push((data, hole - data));
        off = hole;
    }
    rustix::fs::seek(file, SeekFrom::Start(0))?;
    if segs.len() == 1 && segs[0] == (0, size) {
        return Ok(None);
    }
    Ok(Some(segs))
}

/// Create a fifo, socket or device node (mode bits applied later).
pub(crate) fn mknod(path: &Path, kind: Kind, rdev: u64) -> io::Result<()> {
    let ft = match kind {
        Kind::Fifo => FileType::Fifo,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharacterDevice,
        Kind::BlockDev => FileType::BlockDevice,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("mknod of {other:?}"),
            ))
        }
    };
    rustix::fs::mknodat(CWD, path, ft, Mode::from_raw_mode(0o600), rdev)?;
    Ok(())
}

/// `lchown`.
pub(crate) fn set_owner(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
}

/// Make the xattrs of `path` exactly `want` (extra ones removed).
pub(crate) fn set_xattrs_exact(path: &Path, want: &BTreeMap<String, Vec<u8>>) -> Result<()> {
    let have = read_xattrs(path)?;
    for name in have.keys() {
        if !want.contains_key(name) {
            xattr::remove(path, name)?;
        }
    }
    for (name, value) in want {
        if have.get(name) != Some(value) {
            xattr::set(path, name, value)?;
        }
    }
    Ok(())
}

/// chmod (never on a symlink).
pub(crate) fn set_perm(path: &Path, perm: u32) -> io::Result<()> {
    rustix::fs::chmodat(
        CWD,
        path,
        Mode::from_raw_mode(perm & 0o7777),
        AtFlags::empty(),
    )?;
    Ok(())
}

/// [`set_owner`], [`set_perm`] and [`set_mtime`] of a regular file, through its open
/// descriptor: no path lookup per call.
pub(crate) fn set_owner_fd(file: &std::fs::File, uid: u32, gid: u32) -> io::Result<()> {
    rustix::fs::fchown(
        file,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    )?;
    Ok(())
}

/// See [`set_owner_fd`].
pub(crate) fn set_perm_fd(file: &std::fs::File, perm: u32) -> io::Result<()> {
    rustix::fs::fchmod(file, Mode::from_raw_mode(perm & 0o7777))?;
    Ok(())
}

/// See [`set_owner_fd`].
pub(crate) fn set_mtime_fd(file: &std::fs::File, sec: i64, nsec: i64) -> io::Result<()> {
    rustix::fs::futimens(file, &both_times(sec, nsec))?;
    Ok(())
}

/// Timestamps with atime and mtime both the given time.
fn both_times(sec: i64, nsec: i64) -> Timestamps {
    let t = Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// Set atime and mtime to the given mtime, not following symlinks.
pub(crate) fn set_mtime(path: &Path, sec: i64, nsec: i64) -> io::Result<()> {
    rustix::fs::utimensat(CWD, path, &both_times(sec, nsec), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Remove whatever is at `path` (a directory recursively); missing is fine.
pub(crate) fn remove_any(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(md) if md.is_dir() => remove_tree(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Remove a directory tree, making read-only directories writable first when needed.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(first) => {
            for entry in walkdir::WalkDir::new(path).follow_links(false) {
                let Ok(entry) = entry else { continue };
                if entry.file_type().is_dir() {
                    let _ = set_perm(entry.path(), 0o700);
                }
            }
            std::fs::remove_dir_all(path).map_err(|_| first)
        }
    }
}

/// Apply owner (when `owner`), xattrs, mode (not on symlinks) and mtime, in the order that
/// keeps setuid bits and capabilities intact.
pub(crate) fn apply_meta(path: &Path, meta: &Meta, owner: bool, times: bool) -> Result<()> {
    if owner {
        set_owner(path, meta.uid, meta.gid)?;
    }
    set_xattrs_exact(path, &meta.xattrs)?;
    if meta.kind != Kind::Symlink {
        set_perm(path, meta.perm)?;
    }
    if times {
        set_mtime(path, meta.mtime_sec, meta.mtime_nsec)?;
    }
    Ok(())
}

/// True when running as root (owners can be set).
pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Join a relative path onto `base` ("" → `base`).
pub(crate) fn join(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(rel)
    }
}
