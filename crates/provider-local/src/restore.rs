//! Restoring a node's tree into a running box without stopping its processes (`checkout
//! --keep-processes`): the differences are applied through the box's own root, so the
//! overlay records them as ordinary writes.
//!
//! Every path is resolved inside the box's root (`openat2` with `RESOLVE_IN_ROOT`, no magic
//! links): a symlink the box planted can never lead a write out of the box, and the last
//! component of a path is never followed.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use agentbox_store::fsops::{Kind, Meta};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Timespec, Timestamps};

/// A file's owner as given to `chown`.
type Owner = (rustix::fs::Uid, rustix::fs::Gid);

/// The root directory of a running box, as its PID 1 sees it.
pub struct BoxRoot {
    root: OwnedFd,
    /// Box root's host ids when the box runs in a user namespace: owners written through
    /// its root are box ids shifted by them (its layers are idmapped).
    ids: Option<agentbox_sandbox::proto::IdRange>,
}

impl BoxRoot {
    /// The owner that makes on-disk owner `meta.uid`/`meta.gid` when written through the
    /// box's root.
    fn owner(&self, meta: &Meta) -> Owner {
        let shift = |id: u32, base: u32, count: u32| {
            // An id the box cannot map is its overflow id, nobody.
            base + if id < count { id } else { 65534.min(count - 1) }
        };
        let (uid, gid) = match self.ids {
            Some(r) => (
                shift(meta.uid, r.uid, r.count),
                shift(meta.gid, r.gid, r.count),
            ),
            None => (meta.uid, meta.gid),
        };
        (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        )
    }
}

fn times(meta: &Meta) -> Timestamps {
    let t = Timespec {
        tv_sec: meta.mtime_sec,
        tv_nsec: meta.mtime_nsec as _,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

impl BoxRoot {
    /// The root of the box whose PID 1 has host PID `pid`. When box root is an id range
    /// (`ids`), the writes must come from a thread acting as box root
    /// ([`agentbox_sandbox::idmap::ActingAsBoxRoot`]).
    pub fn of_pid(pid: i32, ids: Option<agentbox_sandbox::proto::IdRange>) -> io::Result<BoxRoot> {
        let root = rustix::fs::open(
            format!("/proc/{pid}/root"),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(BoxRoot { root, ids })
    }

    /// A directory of the box, resolved inside it.
    fn dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        Ok(rustix::fs::openat2(
            &self.root,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )?)
    }

    /// Remove whatever is at `rel` (a directory with its content); missing is fine.
    pub fn remove(&self, rel: &Path) -> io::Result<()> {
        let (parent, name) = agentbox_core::at::split(rel)?;
        let pfd = match self.dir(parent) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        agentbox_core::at::remove(&pfd, name)
    }

    /// Make `rel` hold the entry `meta` whose content (files) is read from `src` on the host.
    /// A directory already there is kept (only its attributes change); anything else is
    /// replaced.
    pub fn put(&self, rel: &Path, src: &Path, meta: &Meta) -> io::Result<()> {
        let (parent, name) = agentbox_core::at::split(rel)?;
        let pfd = self.dir(parent)?;
        let existing = rustix::fs::statat(&pfd, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let is_dir = |st: &rustix::fs::Stat| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        };
        if existing
            .as_ref()
            .is_some_and(|st| meta.kind != Kind::Dir || !is_dir(st))
        {
            agentbox_core::at::remove(&pfd, name)?;
        }
        let mode = Mode::from_raw_mode(meta.perm);
        match meta.kind {
            Kind::Dir => {
                if !existing.as_ref().is_some_and(is_dir) {
                    rustix::fs::mkdirat(&pfd, name, Mode::from_raw_mode(0o700))?;
                }
                let fd = agentbox_core::at::open_dir(&pfd, name)?;
                apply_meta(&fd, meta, self.owner(meta))
            }
            Kind::File => {
                let fd = rustix::fs::openat(
                    &pfd,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                let mut out = std::fs::File::from(fd);
                let mut input = fs_err::File::open(src)?;
                io::copy(&mut input, &mut out)?;
                apply_meta(&out, meta, self.owner(meta))
            }
            Kind::Symlink => {
                let target = match &meta.target {
                    Some(t) => t.clone(),
                    None => fs_err::read_link(src)?,
                };
                rustix::fs::symlinkat(&target, &pfd, name)?;
                own_at(&pfd, name, meta, self.owner(meta))
            }
            Kind::Fifo | Kind::CharDev | Kind::BlockDev | Kind::Socket => {
                let ft = match meta.kind {
                    Kind::Fifo => rustix::fs::FileType::Fifo,
                    Kind::CharDev => rustix::fs::FileType::CharacterDevice,
                    Kind::BlockDev => rustix::fs::FileType::BlockDevice,
                    _ => rustix::fs::FileType::Socket,
                };
                rustix::fs::mknodat(&pfd, name, ft, mode, meta.rdev)?;
                own_at(&pfd, name, meta, self.owner(meta))?;
                chmod_node(&pfd, name, ft, mode)
            }
        }
    }

    /// Set a directory's attributes again (adding entries moved its modification time).
    pub fn settle_dir(&self, rel: &Path, meta: &Meta) -> io::Result<()> {
        apply_meta(&self.dir(rel)?, meta, self.owner(meta))
    }
}

/// Give node `name` of `pfd` (a device, FIFO or socket just made, of type `ft`) its mode.
/// `chmodat` would follow a symlink the running box put there meanwhile — resolved against
/// the host's `/`, not the box's root — so the node itself is pinned first (`O_PATH`,
/// not following) and changed through its descriptor's magic link, which names that very
/// inode.
fn chmod_node(
    pfd: &OwnedFd,
    name: &std::ffi::OsStr,
    ft: rustix::fs::FileType,
    mode: Mode,
) -> io::Result<()> {
    let fd = rustix::fs::openat(
        pfd,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != ft {
        return Err(io::Error::other(format!(
            "{} was replaced while it was restored",
            Path::new(name).display()
        )));
    }
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    Ok(rustix::fs::chmod(path.as_str(), mode)?)
}

/// Owner and times of a non-directory that cannot be opened (symlinks, devices).
fn own_at(pfd: &OwnedFd, name: &std::ffi::OsStr, meta: &Meta, owner: Owner) -> io::Result<()> {
    rustix::fs::chownat(
        pfd,
        name,
        Some(owner.0),
        Some(owner.1),
        AtFlags::SYMLINK_NOFOLLOW,
    )?;
    rustix::fs::utimensat(pfd, name, &times(meta), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Owner, xattrs, mode, then times: chown clears setuid bits, so the mode comes after it.
fn apply_meta(fd: impl AsFd, meta: &Meta, owner: Owner) -> io::Result<()> {
    rustix::fs::fchown(&fd, Some(owner.0), Some(owner.1))?;
    for (k, v) in &meta.xattrs {
        if agentbox_store::fsops::scan::is_overlay_xattr(k) {
            continue;
        }
        rustix::fs::fsetxattr(&fd, k.as_str(), v, rustix::fs::XattrFlags::empty())?;
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(meta.perm))?;
    rustix::fs::futimens(&fd, &times(meta))?;
    Ok(())
}
