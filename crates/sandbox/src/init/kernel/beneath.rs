//! Changes below a root the box controls, made without following any symlink on the way.
//!
//! PID 1 builds the box's root as host root (or, rootless, as the host user), before it
//! enters the box's user namespace and before `pivot_root`: an absolute symlink the box
//! planted in its layer, or in a directory bound read-write into it, would resolve against
//! the host's `/`. So every change below a confined root is made relative to a descriptor
//! of that root, each path resolved by `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`: a symlink anywhere on the way (the last component included,
//! except for the calls that act on a name itself: remove, make a symlink or a whiteout)
//! fails with `ELOOP`, and nothing can lead outside the root.
//!
//! Mounts take the resolved descriptor: `mount(2)` is given `/proc/self/fd/N` (a magic link
//! the kernel follows to that very file, whatever the names now say), `move_mount(2)` the
//! descriptor itself.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// How every path below a confined root is looked up.
pub(crate) const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The roots whose trees the box controls, and the lookups below them.
#[derive(Debug, Default)]
pub(crate) struct Confined(Vec<PathBuf>);

/// A path resolved below a confined root: the descriptor it names (kept open while the
/// call that uses [`Resolved::path`] runs).
pub(crate) struct Resolved {
    fd: Option<OwnedFd>,
    plain: PathBuf,
}

impl Resolved {
    /// The path to give a call that takes a path: the caller's, or the descriptor's magic
    /// link.
    pub(crate) fn path(&self) -> PathBuf {
        match &self.fd {
            Some(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
            None => self.plain.clone(),
        }
    }

    pub(crate) fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }
}

impl Confined {
    pub(crate) fn add(&mut self, root: &Path) {
        self.0.push(root.to_owned());
    }

    /// The confined root `path` is below (the innermost one) and `path` relative to it;
    /// `None` when `path` is below none. A relative path or one with `..` below a root is
    /// refused: it could not be resolved the same way by name.
    fn split<'a>(&'a self, path: &'a Path) -> io::Result<Option<(&'a Path, &'a Path)>> {
        let Some(root) = self
            .0
            .iter()
            .filter(|r| path.starts_with(r))
            .max_by_key(|r| r.components().count())
        else {
            return Ok(None);
        };
        let rel = path
            .strip_prefix(root)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(Some((root, rel)))
    }

    /// Open `rel` below `root` with `flags`, no symlink followed.
    fn open_in(root: &Path, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let dir = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        Ok(rustix::fs::openat2(
            &dir,
            rel,
            flags | OFlags::CLOEXEC,
            mode,
            RESOLVE,
        )?)
    }

    /// `path` itself, or below a confined root an `O_PATH` descriptor of it (a symlink
    /// anywhere on the way, the last component too, refused).
    pub(crate) fn resolve(&self, path: &Path) -> io::Result<Resolved> {
        let fd = match self.split(path)? {
            None => None,
            Some((root, rel)) => Some(Self::open_in(root, rel, OFlags::PATH, Mode::empty())?),
        };
        Ok(Resolved {
            fd,
            plain: path.to_owned(),
        })
    }

    /// For a call that acts on a name in a directory: below a confined root, the
    /// directory's descriptor (resolved without symlinks) and the name; `None` elsewhere.
    pub(crate) fn parent<'a>(&self, path: &'a Path) -> io::Result<Option<(OwnedFd, &'a OsStr)>> {
        let Some((root, rel)) = self.split(path)? else {
            return Ok(None);
        };
        let (Some(dir), Some(name)) = (rel.parent(), path.file_name()) else {
            // The root itself has no name in a directory below the root.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let fd = Self::open_in(root, dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
        Ok(Some((fd, name)))
    }

    /// Below a confined root: open (and with `CREATE`, make) `path` with `flags`; `None`
    /// elsewhere.
    pub(crate) fn open(
        &self,
        path: &Path,
        flags: OFlags,
        mode: u32,
    ) -> io::Result<Option<OwnedFd>> {
        let Some((root, rel)) = self.split(path)? else {
            return Ok(None);
        };
        Self::open_in(root, rel, flags, Mode::from_raw_mode(mode)).map(Some)
    }

    /// Below a confined root: make `path` and every missing directory above it, each one
    /// made in its parent's descriptor and opened without following a symlink. `false`
    /// when `path` is below no confined root.
    pub(crate) fn mkdir_p(&self, path: &Path) -> io::Result<bool> {
        let Some((root, rel)) = self.split(path)? else {
            return Ok(false);
        };
        let mut dir = Self::open_in(
            root,
            Path::new(""),
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )?;
        for c in rel.components() {
            let name = c.as_os_str();
            match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            dir = rustix::fs::openat2(
                &dir,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                RESOLVE,
            )?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confined(root: &Path) -> Confined {
        let mut c = Confined::default();
        c.add(root);
        c
    }

    /// A box's planted chain — `etc/resolv.conf` → `/run/x` → an absolute host path — is
    /// refused at every step a change takes, and nothing appears at the host path.
    #[test]
    fn a_symlink_below_the_root_is_never_followed() {
        let tmp = tempfile::tempdir().expect("test setup");
        let (root, host) = (tmp.path().join("r"), tmp.path().join("host"));
        std::fs::create_dir_all(root.join("etc")).expect("test setup");
        std::fs::create_dir_all(root.join("run")).expect("test setup");
        std::fs::create_dir_all(&host).expect("test setup");
        std::os::unix::fs::symlink(&host, root.join("run/dir")).expect("test setup");
        std::os::unix::fs::symlink(host.join("pwned"), root.join("run/x")).expect("test setup");
        std::os::unix::fs::symlink("/run/x", root.join("etc/resolv.conf")).expect("test setup");
        let c = confined(&root);
        let create = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC;
        let loops = |r: io::Result<()>| r.err().and_then(|e| e.raw_os_error()) == Some(libc::ELOOP);
        assert!(loops(
            c.open(&root.join("etc/resolv.conf"), create, 0o644)
                .map(drop)
        ));
        assert!(loops(c.open(&root.join("run/x"), create, 0o644).map(drop)));
        assert!(loops(
            c.open(&root.join("run/dir/pwned"), create, 0o644).map(drop)
        ));
        assert!(loops(c.mkdir_p(&root.join("run/dir/a/b")).map(drop)));
        assert!(loops(c.parent(&root.join("run/dir/pwned")).map(drop)));
        assert!(loops(c.resolve(&root.join("run/x")).map(drop)));
        assert!(std::fs::read_dir(&host)
            .expect("test setup")
            .next()
            .is_none());
        // `..` is refused by name, never looked up.
        assert!(c
            .open(&root.join("etc/../../host/y"), create, 0o644)
            .is_err());
        // Plain directories are made and files written.
        assert!(c
            .mkdir_p(&root.join("run/systemd/resolve"))
            .expect("test setup"));
        let fd = c
            .open(&root.join("run/systemd/resolve/f"), create, 0o644)
            .expect("test setup");
        assert!(fd.is_some());
        assert!(root.join("run/systemd/resolve/f").is_file());
        // Outside every confined root, nothing is done here.
        assert!(c
            .open(&host.join("z"), create, 0o644)
            .expect("test setup")
            .is_none());
    }
}
