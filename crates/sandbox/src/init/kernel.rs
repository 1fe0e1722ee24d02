//! The kernel seam of the box's root filesystem: every system call the rootfs builder
//! ([`super::rootfs`]) makes goes through [`Kernel`], so which mounts are made, in which
//! order, with which flags, and which paths are hidden is decided by plain code that runs
//! without root against the recording kernel of the unit tests (`kernel/recording.rs`).
//!
//! Invariants:
//! * [`Linux`] is the only implementation that reaches the kernel, and the rootfs builder
//!   holds no `unsafe` of its own (the module denies it): what is left to trust is a thin,
//!   one-call-per-method layer.
//! * Each method of [`Linux`] makes the one call its name says (same arguments, same
//!   flags), and returns the kernel's error untouched: the builder adds the context (which
//!   path, which step) to the message. Below a root given to [`Kernel::confine`], the call
//!   is made on the path resolved without following any symlink (`kernel/beneath.rs`).
//! * The queries (`stat`, `read_link`, …) look, never change: a recording answers them from
//!   the paths a test said exist and the ones the recorded calls made.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use crate::idmap::BoxUserNs;

mod beneath;
#[cfg(test)]
pub(crate) mod recording;

/// What a path is, as far as building the root cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
    /// A device node, socket, FIFO, or a file type that could not be read.
    Other,
}

/// The attributes of a path the builder reads: its kind, owner and mode (as `st_mode`, the
/// file-type bits included), and the file system it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub kind: Kind,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    /// `st_dev`.
    pub dev: u64,
}

/// One entry of a directory listing; `kind` is the entry's own (symlinks not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: OsString,
    pub kind: Kind,
}

/// The system calls that build a box's root, one method each.
///
/// Errors are the kernel's (`io::Error`), except for the few operations whose real
/// implementation is several calls and says itself which one failed (`String`).
pub(crate) trait Kernel {
    /// `stat(2)`: symlinks followed.
    fn stat(&self, path: &Path) -> io::Result<Stat>;
    /// `lstat(2)`: a symlink is itself.
    fn lstat(&self, path: &Path) -> io::Result<Stat>;
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The entries of a directory; an entry that cannot be read is left out.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>>;
    /// `lgetxattr(2)`: the value of extended attribute `name` of `path` (a symlink is
    /// itself), `None` when it has none.
    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>>;

    /// A new file system of type `fstype` (or an overlay) at `target`.
    fn mount(
        &mut self,
        src: &str,
        target: &Path,
        fstype: &str,
        flags: MountFlags,
        data: &CStr,
    ) -> io::Result<()>;
    /// `src`'s mount (only it, not what is mounted below it) also at `target`.
    fn bind(&mut self, src: &Path, target: &Path) -> io::Result<()>;
    /// `src` and every mount below it also at `target`.
    fn rbind(&mut self, src: &Path, target: &Path) -> io::Result<()>;
    /// Change the flags of the mount at `target` (`MS_REMOUNT` is implied).
    fn remount(&mut self, target: &Path, flags: MountFlags) -> io::Result<()>;
    fn set_propagation(&mut self, target: &Path, flags: MountPropagationFlags) -> io::Result<()>;
    /// A copy of `src`'s mount at `target` whose ids are mapped through `ns`
    /// (`open_tree`, `mount_setattr`, `move_mount`).
    fn idmapped_mount(&mut self, ns: &BoxUserNs, src: &Path, target: &Path) -> Result<(), String>;
    fn unmount(&mut self, target: &Path, flags: UnmountFlags) -> io::Result<()>;

    /// From here on, every change below `root` — a file or directory made, written or
    /// removed, its owner, mode or extended attributes changed, a mount placed on it or a
    /// bind taken from it — is resolved below `root` without following a symlink anywhere
    /// on the way (the last component included, but for the calls that act on a name
    /// itself: removing, making a symlink or a whiteout): such a change fails with `ELOOP`.
    /// The box controls what is below `root`, and this process acts there with the host's
    /// privileges (see `kernel/beneath.rs`). The queries are not confined: they change
    /// nothing.
    fn confine(&mut self, root: &Path);

    /// `path` and every missing directory above it.
    fn mkdir_p(&mut self, path: &Path) -> io::Result<()>;
    /// An empty regular file at `path` (truncated if it exists): a mount point for a file.
    fn create_file(&mut self, path: &Path) -> io::Result<()>;
    fn write_file(&mut self, path: &Path, content: &[u8]) -> io::Result<()>;
    fn remove_file(&mut self, path: &Path) -> io::Result<()>;
    /// A symlink at `link` pointing to `target`.
    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()>;
    fn chown(&mut self, path: &Path, uid: u32, gid: u32) -> io::Result<()>;
    /// `mode`: the permission bits (`0o7777` at most).
    fn chmod(&mut self, path: &Path, mode: u32) -> io::Result<()>;
    fn set_xattr(&mut self, path: &Path, name: &str, value: &[u8]) -> io::Result<()>;
    /// An overlayfs whiteout (a character device 0:0) at `path`.
    fn whiteout(&mut self, path: &Path) -> io::Result<()>;

    /// From here on this process creates files as `ns`'s root (see
    /// [`BoxUserNs::act_on_files_as_box_root`]).
    fn act_on_files_as_box_root(&mut self, ns: &BoxUserNs) -> Result<(), String>;
    fn set_hostname(&mut self, name: &str) -> io::Result<()>;
    /// Bring up `lo` in this process's (fresh) network namespace.
    fn loopback_up(&mut self) -> Result<(), String>;
    fn chdir(&mut self, dir: &Path) -> io::Result<()>;
    fn pivot_root(&mut self, new_root: &Path, put_old: &Path) -> io::Result<()>;
}

/// The real kernel.
#[derive(Debug, Default)]
pub(crate) struct Linux {
    confined: beneath::Confined,
}

fn stat_of(m: &std::fs::Metadata) -> Stat {
    Stat {
        kind: kind_of(m.file_type()),
        uid: m.uid(),
        gid: m.gid(),
        mode: m.mode(),
        dev: m.dev(),
    }
}

fn kind_of(t: std::fs::FileType) -> Kind {
    if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else if t.is_symlink() {
        Kind::Symlink
    } else {
        Kind::Other
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

fn errno(what: impl std::fmt::Display) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

fn cpath(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} contains NUL", p.display()))
}

impl Kernel for Linux {
    fn stat(&self, path: &Path) -> io::Result<Stat> {
        std::fs::metadata(path).map(|m| stat_of(&m))
    }

    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        std::fs::symlink_metadata(path).map(|m| stat_of(&m))
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<Entry>> {
        Ok(std::fs::read_dir(path)?
            .flatten()
            .map(|e| Entry {
                name: e.file_name(),
                kind: e.file_type().map_or(Kind::Other, kind_of),
            })
            .collect())
    }

    fn get_xattr(&self, path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
        // Overlay markers are a few bytes; a longer value is no marker of ours.
        let mut buf = [0u8; 256];
        match rustix::fs::lgetxattr(path, name, &mut buf) {
            Ok(n) => Ok(Some(buf[..n].to_vec())),
            Err(rustix::io::Errno::NODATA) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn mount(
        &mut self,
        src: &str,
        target: &Path,
        fstype: &str,
        flags: MountFlags,
        data: &CStr,
    ) -> io::Result<()> {
        let target = self.confined.resolve(target)?;
        Ok(rustix::mount::mount(
            src,
            target.path(),
            fstype,
            flags,
            data,
        )?)
    }

    fn bind(&mut self, src: &Path, target: &Path) -> io::Result<()> {
        let (src, target) = (self.confined.resolve(src)?, self.confined.resolve(target)?);
        Ok(rustix::mount::mount_bind(src.path(), target.path())?)
    }

    fn rbind(&mut self, src: &Path, target: &Path) -> io::Result<()> {
        let (src, target) = (self.confined.resolve(src)?, self.confined.resolve(target)?);
        Ok(rustix::mount::mount(
            src.path(),
            target.path(),
            "",
            MountFlags::BIND | MountFlags::REC,
            c"",
        )?)
    }

    fn remount(&mut self, target: &Path, flags: MountFlags) -> io::Result<()> {
        let target = self.confined.resolve(target)?;
        Ok(rustix::mount::mount_remount(target.path(), flags, "")?)
    }

    fn set_propagation(&mut self, target: &Path, flags: MountPropagationFlags) -> io::Result<()> {
        let target = self.confined.resolve(target)?;
        Ok(rustix::mount::mount_change(target.path(), flags)?)
    }

    fn idmapped_mount(&mut self, ns: &BoxUserNs, src: &Path, target: &Path) -> Result<(), String> {
        let csrc = cpath(src)?;
        // SAFETY: plain system call; the path outlives it.
        let tree = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                csrc.as_ptr(),
                libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
            )
        };
        if tree < 0 {
            return Err(errno(format!("open_tree {}", src.display())));
        }
        // SAFETY: open_tree returned a new descriptor that nothing else owns.
        let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: ns.fd().as_raw_fd() as u64,
        };
        // SAFETY: plain system call on a descriptor we own and a struct of the kernel's
        // layout.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if r < 0 {
            return Err(format!(
                "{}: the file system there cannot be idmapped ({}); box root needs idmapped mounts (Linux 5.19 or later; ext4, btrfs, xfs or tmpfs)",
                src.display(),
                io::Error::last_os_error()
            ));
        }
        let at = self
            .confined
            .resolve(target)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        match at.fd() {
            // `move_mount` does not follow a magic link: it takes the descriptor itself.
            Some(fd) => rustix::mount::move_mount(
                tree.as_fd(),
                "",
                fd,
                "",
                rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH
                    | rustix::mount::MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
            ),
            None => rustix::mount::move_mount(
                tree.as_fd(),
                "",
                rustix::fs::CWD,
                target,
                rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            ),
        }
        .map_err(|e| {
            format!(
                "placing the idmapped {} at {}: {e}",
                src.display(),
                target.display()
            )
        })
    }

    fn unmount(&mut self, target: &Path, flags: UnmountFlags) -> io::Result<()> {
        let target = self.confined.resolve(target)?;
        Ok(rustix::mount::unmount(target.path(), flags)?)
    }

    fn confine(&mut self, root: &Path) {
        self.confined.add(root);
    }

    fn mkdir_p(&mut self, path: &Path) -> io::Result<()> {
        if self.confined.mkdir_p(path)? {
            return Ok(());
        }
        std::fs::create_dir_all(path)
    }

    fn create_file(&mut self, path: &Path) -> io::Result<()> {
        self.write_file(path, b"")
    }

    fn write_file(&mut self, path: &Path, content: &[u8]) -> io::Result<()> {
        use rustix::fs::OFlags;
        // `NONBLOCK`: a FIFO the box planted fails to open rather than hold PID 1.
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NONBLOCK;
        match self.confined.open(path, flags, 0o666)? {
            Some(fd) => {
                let mut file = std::fs::File::from(fd);
                io::Write::write_all(&mut file, content)
            }
            None => std::fs::write(path, content),
        }
    }

    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        match self.confined.parent(path)? {
            Some((dir, name)) => Ok(rustix::fs::unlinkat(
                &dir,
                name,
                rustix::fs::AtFlags::empty(),
            )?),
            None => std::fs::remove_file(path),
        }
    }

    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()> {
        match self.confined.parent(link)? {
            Some((dir, name)) => Ok(rustix::fs::symlinkat(target, &dir, name)?),
            None => std::os::unix::fs::symlink(target, link),
        }
    }

    fn chown(&mut self, path: &Path, uid: u32, gid: u32) -> io::Result<()> {
        let (uid, gid) = (
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        );
        let at = self.confined.resolve(path)?;
        match at.fd() {
            Some(fd) => rustix::fs::chownat(fd, "", uid, gid, rustix::fs::AtFlags::EMPTY_PATH)?,
            None => rustix::fs::chown(path, uid, gid)?,
        }
        Ok(())
    }

    fn chmod(&mut self, path: &Path, mode: u32) -> io::Result<()> {
        let at = self.confined.resolve(path)?;
        std::fs::set_permissions(at.path(), std::fs::Permissions::from_mode(mode))
    }

    fn set_xattr(&mut self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        let at = self.confined.resolve(path)?;
        Ok(rustix::fs::setxattr(
            at.path(),
            name,
            value,
            rustix::fs::XattrFlags::empty(),
        )?)
    }

    fn whiteout(&mut self, path: &Path) -> io::Result<()> {
        let (dir, name) = match self.confined.parent(path)? {
            Some((dir, name)) => (Some(dir), name.as_ref()),
            None => (None, path),
        };
        let dir = dir.as_ref().map_or(rustix::fs::CWD, |d| d.as_fd());
        Ok(rustix::fs::mknodat(
            dir,
            name,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::empty(),
            0,
        )?)
    }

    fn act_on_files_as_box_root(&mut self, ns: &BoxUserNs) -> Result<(), String> {
        ns.act_on_files_as_box_root()
    }

    fn set_hostname(&mut self, name: &str) -> io::Result<()> {
        Ok(rustix::system::sethostname(name.as_bytes())?)
    }

    fn loopback_up(&mut self) -> Result<(), String> {
        let err = |what: &str, e: io::Error| format!("{what}: {e}");
        // SAFETY: a datagram socket and two ioctls on a zeroed, correctly sized ifreq.
        unsafe {
            let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if s < 0 {
                return Err(err("socket", io::Error::last_os_error()));
            }
            let mut req: libc::ifreq = std::mem::zeroed();
            for (i, b) in b"lo\0".iter().enumerate() {
                req.ifr_name[i] = *b as libc::c_char;
            }
            let r = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req);
            if r == 0 {
                req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
                libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
            }
            let e = io::Error::last_os_error();
            libc::close(s);
            if r != 0 {
                return Err(err("bringing up the loopback interface", e));
            }
        }
        Ok(())
    }

    fn chdir(&mut self, dir: &Path) -> io::Result<()> {
        Ok(rustix::process::chdir(dir)?)
    }

    fn pivot_root(&mut self, new_root: &Path, put_old: &Path) -> io::Result<()> {
        Ok(rustix::process::pivot_root(new_root, put_old)?)
    }
}
