//! Disk limits of a directory tree: btrfs qgroups and ext4/xfs project quotas.
//!
//! * btrfs: quotas are enabled on the filesystem ([`btrfs_enable_quota`]), and the
//!   qgroup of a subvolume gets a limit on its *exclusive* bytes
//!   ([`btrfs_limit_subvolume`]): data the subvolume shares with snapshots (reflinked
//!   copy-ups of unchanged files) is not charged, what it writes is.
//! * ext4/xfs: a directory gets a project id and the `PROJINHERIT` flag
//!   ([`set_project`]): everything created below it inherits both, and the project's block
//!   usage is limited with `quotactl_fd(Q_SETQUOTA, PRJQUOTA)` ([`set_project_limit`]).
//!   The filesystem must account project quotas (ext4: `-O quota,project` and mounted with
//!   `prjquota`; xfs: mounted with `prjquota`); [`project_quotas_on`] tells.
//!
//! Writes past either limit fail with `EDQUOT`. Everything here needs `CAP_SYS_ADMIN` in
//! the initial user namespace; a process in a box's user namespace can neither change a
//! project id nor a qgroup, so it cannot move its files out of its limit.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

use rustix::ioctl::opcode;
use rustix::ioctl::Opcode;

use crate::raw::ioctl_ptr;

/// `struct btrfs_ioctl_quota_ctl_args`.
#[repr(C)]
struct QuotaCtlArgs {
    cmd: u64,
    status: u64,
}

/// `struct btrfs_qgroup_limit`.
#[repr(C)]
struct QgroupLimit {
    flags: u64,
    max_rfer: u64,
    max_excl: u64,
    rsv_rfer: u64,
    rsv_excl: u64,
}

/// `struct btrfs_ioctl_qgroup_limit_args`.
#[repr(C)]
struct QgroupLimitArgs {
    qgroupid: u64,
    lim: QgroupLimit,
}

/// `struct fsxattr` (`linux/fs.h`).
#[repr(C)]
#[derive(Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `struct if_dqblk` (`linux/quota.h`).
#[repr(C)]
#[derive(Default)]
struct IfDqblk {
    bhardlimit: u64,
    bsoftlimit: u64,
    curspace: u64,
    ihardlimit: u64,
    isoftlimit: u64,
    curinodes: u64,
    btime: u64,
    itime: u64,
    valid: u32,
}

/// `struct if_dqinfo`.
#[repr(C)]
#[derive(Default)]
struct IfDqinfo {
    bgrace: u64,
    igrace: u64,
    flags: u32,
    valid: u32,
}

const _: () = assert!(std::mem::size_of::<QuotaCtlArgs>() == 16);
const _: () = assert!(std::mem::size_of::<QgroupLimitArgs>() == 48);
const _: () = assert!(std::mem::size_of::<FsXattr>() == 28);
const _: () = assert!(std::mem::size_of::<IfDqblk>() == 72);
const _: () = assert!(std::mem::size_of::<IfDqinfo>() == 24);

const BTRFS_IOCTL_MAGIC: u8 = 0x94;
const IOC_QUOTA_CTL: Opcode = opcode::read_write::<QuotaCtlArgs>(BTRFS_IOCTL_MAGIC, 40);
/// Declared `_IOR` in `linux/btrfs.h` although the kernel only reads the argument.
const IOC_QGROUP_LIMIT: Opcode = opcode::read::<QgroupLimitArgs>(BTRFS_IOCTL_MAGIC, 43);
const BTRFS_QUOTA_CTL_ENABLE: u64 = 1;
const BTRFS_QGROUP_LIMIT_MAX_EXCL: u64 = 1 << 1;

const FS_IOC_FSGETXATTR: Opcode = opcode::read::<FsXattr>(b'X', 31);
const FS_IOC_FSSETXATTR: Opcode = opcode::write::<FsXattr>(b'X', 32);
const FS_XFLAG_PROJINHERIT: u32 = 0x0000_0200;

const PRJQUOTA: u32 = 2;
const Q_GETINFO: u32 = 0x80_0005;
const Q_GETQUOTA: u32 = 0x80_0007;
const Q_SETQUOTA: u32 = 0x80_0008;
/// `QIF_BLIMITS`: the block limits of an `if_dqblk` are set.
const QIF_BLIMITS: u32 = 1;
/// Quota block limits are in units of `QIF_DQBLKSIZE` bytes.
const QIF_DQBLKSIZE: u64 = 1024;

/// Enable quotas (qgroup accounting) on the btrfs filesystem of `dir`. Already enabled is
/// fine. The first enable scans the filesystem once in the background.
pub fn btrfs_enable_quota(dir: &File) -> io::Result<()> {
    let mut args = QuotaCtlArgs {
        cmd: BTRFS_QUOTA_CTL_ENABLE,
        status: 0,
    };
    // SAFETY: `QuotaCtlArgs` is `struct btrfs_ioctl_quota_ctl_args` (size checked above);
    // `dir` is an open file of the filesystem.
    unsafe { ioctl_ptr(dir, IOC_QUOTA_CTL, &mut args) }.map(|_| ())
}

/// Limit the exclusive bytes of the subvolume whose root `subvol` is (its level-0 qgroup)
/// to `bytes`. Quotas must be enabled.
pub fn btrfs_limit_subvolume(subvol: &File, bytes: u64) -> io::Result<()> {
    let mut args = QgroupLimitArgs {
        // 0: the qgroup of the subvolume `subvol` is in.
        qgroupid: 0,
        lim: QgroupLimit {
            flags: BTRFS_QGROUP_LIMIT_MAX_EXCL,
            max_rfer: 0,
            max_excl: bytes,
            rsv_rfer: 0,
            rsv_excl: 0,
        },
    };
    // SAFETY: `QgroupLimitArgs` is `struct btrfs_ioctl_qgroup_limit_args` (size checked
    // above); `subvol` is an open directory of the subvolume.
    unsafe { ioctl_ptr(subvol, IOC_QGROUP_LIMIT, &mut args) }.map(|_| ())
}

/// The project id of `f`, and whether it has the `PROJINHERIT` flag.
pub fn project(f: &File) -> io::Result<(u32, bool)> {
    let mut attr = FsXattr::default();
    // SAFETY: `FsXattr` is `struct fsxattr` (size checked above); `f` is an open file.
    unsafe { ioctl_ptr(f, FS_IOC_FSGETXATTR, &mut attr) }?;
    Ok((attr.projid, attr.xflags & FS_XFLAG_PROJINHERIT != 0))
}

/// Give the file or directory `f` project id `id`, and a directory the `PROJINHERIT` flag
/// (what is created below it inherits the id).
pub fn set_project(f: &File, id: u32, dir: bool) -> io::Result<()> {
    let mut attr = FsXattr::default();
    // SAFETY: `FsXattr` is `struct fsxattr` (size checked above); `f` is an open file.
    unsafe { ioctl_ptr(f, FS_IOC_FSGETXATTR, &mut attr) }?;
    attr.projid = id;
    if dir {
        attr.xflags |= FS_XFLAG_PROJINHERIT;
    }
    // SAFETY: as above.
    unsafe { ioctl_ptr(f, FS_IOC_FSSETXATTR, &mut attr) }.map(|_| ())
}

fn quotactl_fd<T>(fs: &File, cmd: u32, id: u32, arg: &mut T) -> io::Result<()> {
    let qcmd = (cmd << 8) | PRJQUOTA;
    // SAFETY: quotactl_fd(fd, cmd, id, addr) with `addr` the live, exclusively borrowed
    // struct the command reads or writes (`if_dqblk` or `if_dqinfo`, checked by callers).
    let r = unsafe {
        libc::syscall(
            libc::SYS_quotactl_fd,
            fs.as_raw_fd(),
            qcmd as libc::c_uint,
            id as libc::c_uint,
            std::ptr::from_mut(arg).cast::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the filesystem of `fs` enforces project quotas (`ESRCH`: quotas of that type are
/// off; `ENOSYS`/`EINVAL`/`ENOTSUP`: none at all).
pub fn project_quotas_on(fs: &File) -> io::Result<bool> {
    let mut info = IfDqinfo::default();
    match quotactl_fd(fs, Q_GETINFO, 0, &mut info) {
        Ok(()) => Ok(true),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ESRCH | libc::ENOSYS | libc::EINVAL | libc::ENOTSUP | libc::ENOTTY)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Limit the blocks of project `id` on the filesystem of `fs` to `bytes` (rounded up to
/// whole KiB).
pub fn set_project_limit(fs: &File, id: u32, bytes: u64) -> io::Result<()> {
    let mut q = IfDqblk {
        bhardlimit: bytes.div_ceil(QIF_DQBLKSIZE),
        bsoftlimit: 0,
        valid: QIF_BLIMITS,
        ..IfDqblk::default()
    };
    quotactl_fd(fs, Q_SETQUOTA, id, &mut q)
}

/// `(bytes used, limit in bytes)` of project `id` on the filesystem of `fs` (limit 0: none).
pub fn project_usage(fs: &File, id: u32) -> io::Result<(u64, u64)> {
    let mut q = IfDqblk::default();
    quotactl_fd(fs, Q_GETQUOTA, id, &mut q)?;
    Ok((q.curspace, q.bhardlimit.saturating_mul(QIF_DQBLKSIZE)))
}
