//! Operations relative to a directory descriptor that never follow a symlink: for writing
//! into trees someone else controls (a box's root, a copy boxes share), where a path walked
//! by name could be redirected between a check and its use.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// `rel`'s parent and file name; an error naming `rel` when it has no file name.
pub fn split(rel: &Path) -> io::Result<(&Path, &OsStr)> {
    match (rel.parent(), rel.file_name()) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file below its root", rel.display()),
        )),
    }
}

/// Directory `name` of `parent`, opened only if it is a directory itself (a symlink there
/// fails with `ELOOP`, a file with `ENOTDIR`).
pub fn open_dir(parent: impl AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Remove whatever `name` of `parent` is — a directory with all its content — never
/// following a symlink; nothing there is fine.
pub fn remove(parent: impl AsFd, name: &OsStr) -> io::Result<()> {
    let parent = parent.as_fd();
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let dir = open_dir(parent, name)?;
    let mut names: Vec<OsString> = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let n = entry?.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(&n).to_owned());
        }
    }
    for n in names {
        remove(&dir, &n)?;
    }
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_takes_a_tree_and_never_follows_a_symlink_out_of_it() {
        let t = tempfile::tempdir().expect("tmp");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "x").expect("write");
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("d/e")).expect("mkdir");
        std::fs::write(root.join("d/e/f"), "x").expect("write");
        std::os::unix::fs::symlink(&outside, root.join("d/link")).expect("ln");
        let fd = rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .expect("open");
        remove(&fd, OsStr::new("d")).expect("remove");
        assert!(!root.join("d").exists());
        assert!(
            outside.join("keep").exists(),
            "the link's target is untouched"
        );
        remove(&fd, OsStr::new("missing")).expect("nothing there is fine");
        assert_eq!(
            open_dir(&fd, OsStr::new("d")).err(),
            Some(rustix::io::Errno::NOENT)
        );
    }
}
