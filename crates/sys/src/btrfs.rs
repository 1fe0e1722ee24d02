//! btrfs subvolumes and snapshots through the kernel's ioctls (`linux/btrfs.h`).
//!
//! No `btrfs` command is run: each operation is one ioctl on a directory file descriptor.
//! Creating subvolumes and snapshots and deleting them needs `CAP_SYS_ADMIN` (or, for
//! deletion, the `user_subvol_rm_allowed` mount option).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::ioctl::opcode;
use rustix::ioctl::Opcode;

use crate::raw::{ioctl_none, ioctl_ptr};

/// `f_type` of a btrfs filesystem (`BTRFS_SUPER_MAGIC`).
pub const BTRFS_SUPER_MAGIC: u32 = 0x9123_683E;
/// Inode number of the root directory of every subvolume (`BTRFS_FIRST_FREE_OBJECTID`).
pub const SUBVOLUME_ROOT_INO: u64 = 256;

const BTRFS_IOCTL_MAGIC: u8 = 0x94;
const BTRFS_PATH_NAME_MAX: usize = 4087;
const BTRFS_SUBVOL_NAME_MAX: usize = 4039;
/// `BTRFS_SUBVOL_RDONLY`: the subvolume (or snapshot to create) is read-only.
const BTRFS_SUBVOL_RDONLY: u64 = 1 << 1;

/// `struct btrfs_ioctl_vol_args`.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; BTRFS_PATH_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_vol_args_v2` (the unions flattened to the members used here: the
/// 4×u64 union of `size`/`qgroup_inherit`, and `name` overlapping `devid`/`subvolid`).
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; BTRFS_SUBVOL_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_fs_info_args`.
#[repr(C)]
struct FsInfoArgs {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    nodesize: u32,
    sectorsize: u32,
    clone_alignment: u32,
    csum_type: u16,
    csum_size: u16,
    flags: u64,
    generation: u64,
    metadata_uuid: [u8; 16],
    reserved: [u8; 944],
}

const _: () = assert!(std::mem::size_of::<VolArgs>() == 4096);
const _: () = assert!(std::mem::size_of::<VolArgsV2>() == 4096);
const _: () = assert!(std::mem::size_of::<FsInfoArgs>() == 1024);

const IOC_SYNC: Opcode = opcode::none(BTRFS_IOCTL_MAGIC, 8);
const IOC_SUBVOL_CREATE: Opcode = opcode::write::<VolArgs>(BTRFS_IOCTL_MAGIC, 14);
const IOC_SNAP_DESTROY: Opcode = opcode::write::<VolArgs>(BTRFS_IOCTL_MAGIC, 15);
const IOC_SNAP_CREATE_V2: Opcode = opcode::write::<VolArgsV2>(BTRFS_IOCTL_MAGIC, 23);
const IOC_SUBVOL_GETFLAGS: Opcode = opcode::read::<u64>(BTRFS_IOCTL_MAGIC, 25);
const IOC_SUBVOL_SETFLAGS: Opcode = opcode::write::<u64>(BTRFS_IOCTL_MAGIC, 26);
const IOC_FS_INFO: Opcode = opcode::read::<FsInfoArgs>(BTRFS_IOCTL_MAGIC, 31);

/// Errors of the btrfs wrappers. Every variant names the path concerned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {op}: {source}", path = .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: not on a btrfs filesystem", path = .path.display())]
    NotBtrfs { path: PathBuf },
    #[error("{path}: not a btrfs subvolume", path = .path.display())]
    NotSubvolume { path: PathBuf },
    #[error(
        "{path}: contains nested subvolumes; delete them before deleting this subvolume",
        path = .path.display()
    )]
    NestedSubvolume { path: PathBuf },
    #[error("{path}: invalid subvolume name: {reason}", path = .path.display())]
    InvalidName { path: PathBuf, reason: &'static str },
}

impl Error {
    /// The path the error concerns.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::NotBtrfs { path }
            | Error::NotSubvolume { path }
            | Error::NestedSubvolume { path }
            | Error::InvalidName { path, .. } => path,
        }
    }

    /// The OS error number behind the error, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    fn io(op: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { source, .. } => source.kind(),
            Error::NotBtrfs { .. } => io::ErrorKind::Unsupported,
            Error::NotSubvolume { .. } | Error::InvalidName { .. } => io::ErrorKind::InvalidInput,
            Error::NestedSubvolume { .. } => io::ErrorKind::DirectoryNotEmpty,
        };
        io::Error::new(kind, e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn open_dir(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open directory", path, e.into()))
}

/// Whether `path` (followed if a symlink) lives on a btrfs filesystem.
pub fn is_btrfs(path: &Path) -> io::Result<bool> {
    let st = rustix::fs::statfs(path)
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), annotate(path, "statfs", e)))?;
    Ok(f_type_is_btrfs(st.f_type))
}

/// Whether the open file `fd` lives on a btrfs filesystem.
pub fn fd_is_btrfs(fd: impl AsFd) -> io::Result<bool> {
    let st = rustix::fs::fstatfs(fd)?;
    Ok(f_type_is_btrfs(st.f_type))
}

// `f_type` is a signed long whose width differs between targets; the magic is compared on
// its low 32 bits.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn f_type_is_btrfs<T: TryInto<i64>>(f_type: T) -> bool {
    f_type.try_into().map(|t| t as u32).ok() == Some(BTRFS_SUPER_MAGIC)
}

fn annotate(path: &Path, op: &str, e: rustix::io::Errno) -> String {
    format!("{}: {op}: {}", path.display(), io::Error::from(e))
}

/// Whether `path` is the root of a btrfs subvolume (a directory with inode 256 on btrfs).
/// A symlink is never a subvolume.
pub fn is_subvolume(path: &Path) -> io::Result<bool> {
    let md = std::fs::symlink_metadata(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: lstat: {e}", path.display())))?;
    if !md.is_dir() || md.ino() != SUBVOLUME_ROOT_INO {
        return Ok(false);
    }
    is_btrfs(path)
}

fn check_name(parent: &Path, name: &OsStr, max: usize) -> Result<PathBuf> {
    let path = parent.join(name);
    let bytes = name.as_bytes();
    let reason = if bytes.is_empty() {
        Some("empty")
    } else if bytes == b"." || bytes == b".." {
        Some("`.` and `..` are not names")
    } else if bytes.contains(&b'/') {
        Some("contains `/`")
    } else if bytes.contains(&0) {
        Some("contains a NUL byte")
    } else if bytes.len() > max {
        Some("too long")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidName { path, reason }),
        None => Ok(path),
    }
}

fn require_btrfs(fd: &OwnedFd, path: &Path) -> Result<()> {
    match fd_is_btrfs(fd) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::NotBtrfs {
            path: path.to_owned(),
        }),
        Err(e) => Err(Error::io("fstatfs", path, e)),
    }
}

/// Create an empty, writable subvolume `parent/name`. Returns its path.
pub fn create_subvolume(parent: &Path, name: &OsStr) -> Result<PathBuf> {
    let path = check_name(parent, name, BTRFS_PATH_NAME_MAX)?;
    let dir = open_dir(parent)?;
    require_btrfs(&dir, parent)?;
    let mut args = VolArgs {
        fd: 0,
        name: [0; BTRFS_PATH_NAME_MAX + 1],
    };
    args.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `VolArgs` is `struct btrfs_ioctl_vol_args` (size checked above), the name is
    // NUL-terminated (zeroed array, name shorter than it), and `dir` is an open directory.
    unsafe { ioctl_ptr(&dir, IOC_SUBVOL_CREATE, &mut args) }
        .map_err(|e| Error::io("create subvolume", &path, e))?;
    Ok(path)
}

/// Snapshot subvolume `src` as `dst_parent/name`, read-only when `readonly`. Returns the
/// snapshot's path. The snapshot is atomic: it holds `src` exactly as it was at one instant
/// (the kernel flushes `src`'s dirty data first). Nested subvolumes of `src` are not
/// included (they appear as empty directories).
pub fn snapshot(src: &Path, dst_parent: &Path, name: &OsStr, readonly: bool) -> Result<PathBuf> {
    let path = check_name(dst_parent, name, BTRFS_SUBVOL_NAME_MAX)?;
    let src_fd = open_dir(src)?;
    if !is_subvolume(src).map_err(|e| Error::io("stat", src, e))? {
        return Err(Error::NotSubvolume {
            path: src.to_owned(),
        });
    }
    let dir = open_dir(dst_parent)?;
    require_btrfs(&dir, dst_parent)?;
    let mut args = VolArgsV2 {
        fd: i64::from(src_fd.as_raw_fd()),
        transid: 0,
        flags: if readonly { BTRFS_SUBVOL_RDONLY } else { 0 },
        unused: [0; 4],
        name: [0; BTRFS_SUBVOL_NAME_MAX + 1],
    };
    args.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `VolArgsV2` is `struct btrfs_ioctl_vol_args_v2` (size checked above), the name
    // is NUL-terminated, `fd` is the open source subvolume, and `dir` an open directory.
    unsafe { ioctl_ptr(&dir, IOC_SNAP_CREATE_V2, &mut args) }
        .map_err(|e| Error::io("create snapshot", &path, e))?;
    Ok(path)
}

fn get_flags(fd: &OwnedFd, path: &Path) -> Result<u64> {
    let mut flags = 0u64;
    // SAFETY: BTRFS_IOC_SUBVOL_GETFLAGS writes one `u64`.
    unsafe { ioctl_ptr(fd, IOC_SUBVOL_GETFLAGS, &mut flags) }
        .map_err(|e| Error::io("get subvolume flags", path, e))?;
    Ok(flags)
}

fn subvolume_fd(path: &Path) -> Result<OwnedFd> {
    if !is_subvolume(path).map_err(|e| Error::io("stat", path, e))? {
        return Err(Error::NotSubvolume {
            path: path.to_owned(),
        });
    }
    open_dir(path)
}

/// Whether subvolume `path` is read-only.
pub fn is_readonly(path: &Path) -> Result<bool> {
    let fd = subvolume_fd(path)?;
    Ok(get_flags(&fd, path)? & BTRFS_SUBVOL_RDONLY != 0)
}

/// Make subvolume `path` read-only or writable.
pub fn set_readonly(path: &Path, readonly: bool) -> Result<()> {
    let fd = subvolume_fd(path)?;
    let old = get_flags(&fd, path)?;
    let mut new = if readonly {
        old | BTRFS_SUBVOL_RDONLY
    } else {
        old & !BTRFS_SUBVOL_RDONLY
    };
    if new == old {
        return Ok(());
    }
    // SAFETY: BTRFS_IOC_SUBVOL_SETFLAGS reads one `u64`.
    unsafe { ioctl_ptr(&fd, IOC_SUBVOL_SETFLAGS, &mut new) }
        .map_err(|e| Error::io("set subvolume flags", path, e))?;
    Ok(())
}

/// Delete subvolume (or snapshot) `path`, read-only or not.
///
/// Refuses with [`Error::NestedSubvolume`] when other subvolumes live inside it, and with
/// [`Error::NotSubvolume`] when `path` is a plain directory (or a symlink).
pub fn delete_subvolume(path: &Path) -> Result<()> {
    if !is_subvolume(path).map_err(|e| Error::io("stat", path, e))? {
        return Err(Error::NotSubvolume {
            path: path.to_owned(),
        });
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::InvalidName {
            path: path.to_owned(),
            reason: "has no parent directory and name",
        });
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    check_name(parent, name, BTRFS_PATH_NAME_MAX)?;
    let dir = open_dir(parent)?;
    let destroy = || {
        let mut args = VolArgs {
            fd: 0,
            name: [0; BTRFS_PATH_NAME_MAX + 1],
        };
        args.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: `VolArgs` is `struct btrfs_ioctl_vol_args`, the name NUL-terminated, and
        // `dir` the open parent directory of the subvolume.
        unsafe { ioctl_ptr(&dir, IOC_SNAP_DESTROY, &mut args) }
    };
    let classify = |e: io::Error| {
        if e.raw_os_error() == Some(rustix::io::Errno::NOTEMPTY.raw_os_error()) {
            Error::NestedSubvolume {
                path: path.to_owned(),
            }
        } else {
            Error::io("delete subvolume", path, e)
        }
    };
    match destroy() {
        Ok(_) => Ok(()),
        Err(e) => {
            let refused = [rustix::io::Errno::PERM, rustix::io::Errno::ROFS]
                .iter()
                .any(|errno| e.raw_os_error() == Some(errno.raw_os_error()));
            // Some kernels refuse to delete a read-only subvolume: make it writable and retry.
            if refused && is_readonly(path).unwrap_or(false) {
                set_readonly(path, false)?;
                destroy().map(|_| ()).map_err(classify)
            } else {
                Err(classify(e))
            }
        }
    }
}

/// Force a transaction commit of the filesystem holding `path` (`BTRFS_IOC_SYNC`).
pub fn sync(path: &Path) -> Result<()> {
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open", path, e.into()))?;
    require_btrfs(&fd, path)?;
    // SAFETY: BTRFS_IOC_SYNC takes no argument.
    unsafe { ioctl_none(&fd, IOC_SYNC) }.map_err(|e| Error::io("sync", path, e))
}

/// The UUID of the btrfs filesystem the open file `file` lives on (the same for every
/// subvolume of the filesystem, unlike `st_dev` and `f_fsid`).
pub fn filesystem_uuid(file: &File) -> io::Result<[u8; 16]> {
    let mut args = FsInfoArgs {
        max_id: 0,
        num_devices: 0,
        fsid: [0; 16],
        nodesize: 0,
        sectorsize: 0,
        clone_alignment: 0,
        csum_type: 0,
        csum_size: 0,
        flags: 0,
        generation: 0,
        metadata_uuid: [0; 16],
        reserved: [0; 944],
    };
    // SAFETY: `FsInfoArgs` is `struct btrfs_ioctl_fs_info_args` (size checked above), zeroed
    // so the kernel requests no optional fields through `flags`.
    unsafe { ioctl_ptr(file, IOC_FS_INFO, &mut args) }?;
    Ok(args.fsid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn opcodes_match_linux_headers() {
        // Values printed by a C program including <linux/btrfs.h> on x86_64.
        assert_eq!(IOC_SUBVOL_CREATE as u64, 0x5000_940e);
        assert_eq!(IOC_SNAP_CREATE_V2 as u64, 0x5000_9417);
        assert_eq!(IOC_SNAP_DESTROY as u64, 0x5000_940f);
        assert_eq!(IOC_SUBVOL_GETFLAGS as u64, 0x8008_9419);
        assert_eq!(IOC_SUBVOL_SETFLAGS as u64, 0x4008_941a);
        assert_eq!(IOC_SYNC as u64, 0x9408);
        assert_eq!(IOC_FS_INFO as u64, 0x8400_941f);
    }

    #[test]
    fn names_are_validated() {
        let p = Path::new("/x");
        assert!(check_name(p, OsStr::new(""), 10).is_err());
        assert!(check_name(p, OsStr::new(".."), 10).is_err());
        assert!(check_name(p, OsStr::new("a/b"), 10).is_err());
        assert!(check_name(p, OsStr::new("abcdefghijk"), 10).is_err());
        assert_eq!(
            check_name(p, OsStr::new("ok"), 10).ok(),
            Some(PathBuf::from("/x/ok"))
        );
    }

    #[test]
    fn tmp_is_not_a_subvolume_unless_btrfs() {
        let dir = std::env::temp_dir();
        if !is_btrfs(&dir).unwrap_or(true) {
            assert!(!is_subvolume(&dir).unwrap_or(true));
        }
    }
}
