//! Unpacking an archive a box sent onto the host: the archive is box-controlled, so only
//! regular files and directories are made, each below the destination, each path walked one
//! component at a time from the destination's descriptor with `O_NOFOLLOW` (a symlink met
//! on the way, whoever made it, is an error, never followed). Symlinks, hard links, device
//! files, FIFOs and sockets in the archive are not made: they are reported as skipped. A
//! file already at a path is replaced (unlinked, then made anew), never written through.
//! Setuid, setgid and sticky bits are dropped; owners are the caller's.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use super::{Copied, Skipped};
use crate::{BoxError, Result};

/// Where entries go: the archive's first component `root` becomes `target` in directory
/// `dir` (`root` `None`: entries are relative to `dir` itself, a leading `.` dropped).
pub struct Target<'a> {
    pub dir: &'a Path,
    pub root: Option<(&'a str, &'a str)>,
}

fn refused(path: &Path, why: impl Into<String>) -> BoxError {
    BoxError::Copy {
        path: path.display().to_string(),
        why: why.into(),
        refused: true,
    }
}

fn failed(path: &Path, e: impl std::fmt::Display) -> BoxError {
    BoxError::Copy {
        path: path.display().to_string(),
        why: e.to_string(),
        refused: false,
    }
}

/// The host path an archive path lands at, as components below `to.dir`; `None` for the
/// archive's root directory entry itself when `root` is `None`.
fn components(to: &Target<'_>, path: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, c) in path.components().enumerate() {
        match c {
            Component::Normal(n) => {
                let n = n
                    .to_str()
                    .ok_or_else(|| refused(path, "a name that is not UTF-8"))?;
                match to.root {
                    Some((root, target)) if i == 0 || out.is_empty() => {
                        if n != root {
                            return Err(refused(path, format!("outside {root}")));
                        }
                        out.push(target.to_owned());
                    }
                    _ => out.push(n.to_owned()),
                }
            }
            Component::CurDir => {}
            _ => return Err(refused(path, "a path that leaves the destination")),
        }
    }
    Ok(out)
}

/// Open (making it, mode 0755, when missing) directory `name` in `dir`, never following a
/// symlink.
fn open_dir(dir: impl AsFd, name: &str, shown: &Path) -> Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => {
            match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(failed(shown, e)),
            }
            rustix::fs::openat(&dir, name, flags, Mode::empty()).map_err(|e| failed(shown, e))
        }
        Err(Errno::LOOP) | Err(Errno::NOTDIR) => Err(refused(
            shown,
            "is a symlink or not a directory on the host; not followed",
        )),
        Err(e) => Err(failed(shown, e)),
    }
}

/// The directory holding the last component of `comps`, walked from `base`.
fn parent_of(base: &OwnedFd, comps: &[String], dest: &Path) -> Result<OwnedFd> {
    let mut cur = rustix::io::dup(base).map_err(|e| failed(dest, e))?;
    let mut shown = dest.to_owned();
    for c in &comps[..comps.len() - 1] {
        shown.push(c);
        cur = open_dir(&cur, c, &shown)?;
    }
    Ok(cur)
}

/// A new regular file `name` in `dir` (whatever was there, a directory aside, removed first).
fn new_file(dir: &OwnedFd, name: &str, shown: &Path) -> Result<OwnedFd> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(0o600);
    match rustix::fs::openat(dir, name, flags, mode) {
        Ok(fd) => return Ok(fd),
        Err(Errno::EXIST) => {}
        Err(e) => return Err(failed(shown, e)),
    }
    let st =
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| failed(shown, e))?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        return Err(refused(
            shown,
            "is a directory on the host; a file is not put over it",
        ));
    }
    rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| failed(shown, e))?;
    rustix::fs::openat(dir, name, flags, mode).map_err(|e| failed(shown, e))
}

fn times(mtime: u64) -> Timestamps {
    let t = Timespec {
        tv_sec: mtime.min(i64::MAX as u64) as i64,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// Unpack the archive `from` (box-controlled) to `to`, at most `max_bytes` of file data.
pub fn unpack(from: impl Read, to: &Target<'_>, max_bytes: u64) -> Result<Copied> {
    let base = rustix::fs::open(
        to.dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| failed(to.dir, e))?;
    let mut done = Copied::default();
    // Directories get their mode and time last: writing into one changes its time, and a
    // mode without write permission would stop the files after it.
    let mut dirs: Vec<(Vec<String>, u32, u64)> = Vec::new();
    let mut archive = tar::Archive::new(from);
    let entries = archive.entries().map_err(|e| failed(to.dir, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| failed(to.dir, format!("the box's archive: {e}")))?;
        let raw = entry.path().map_err(|e| failed(to.dir, e))?.into_owned();
        let comps = components(to, &raw)?;
        let shown: PathBuf = comps.iter().fold(to.dir.to_owned(), |p, c| p.join(c));
        let header = entry.header();
        let mode = header.mode().unwrap_or(0o644) & 0o777;
        let mtime = header.mtime().unwrap_or(0);
        let kind = header.entry_type();
        if kind.is_dir() {
            if !comps.is_empty() {
                let parent = parent_of(&base, &comps, to.dir)?;
                drop(open_dir(&parent, &comps[comps.len() - 1], &shown)?);
            }
            dirs.push((comps, mode, mtime));
            done.dirs += 1;
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            if comps.is_empty() {
                return Err(refused(&shown, "a file where the destination directory is"));
            }
            let size = entry.size();
            if done.bytes.saturating_add(size) > max_bytes {
                return Err(refused(
                    &shown,
                    format!("over the size cap of {max_bytes} bytes (--max-size)"),
                ));
            }
            let parent = parent_of(&base, &comps, to.dir)?;
            let fd = new_file(&parent, &comps[comps.len() - 1], &shown)?;
            let mut file = std::fs::File::from(fd);
            // At most the size the header says: the archive cannot write more than counted.
            let copied = std::io::copy(&mut (&mut entry).take(size), &mut file)
                .map_err(|e| failed(&shown, e))?;
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(|e| failed(&shown, e))?;
            rustix::fs::futimens(&file, &times(mtime)).map_err(|e| failed(&shown, e))?;
            done.bytes += copied;
            done.files += 1;
        } else {
            let what = if kind.is_symlink() {
                "symlink"
            } else if kind.is_hard_link() {
                "hard link"
            } else if kind.is_character_special() || kind.is_block_special() {
                "device"
            } else if kind.is_fifo() {
                "fifo"
            } else if kind.is_pax_global_extensions()
                || kind.is_pax_local_extensions()
                || kind.is_gnu_longname()
                || kind.is_gnu_longlink()
            {
                continue;
            } else {
                "other"
            };
            done.skipped.push(Skipped {
                path: shown.display().to_string(),
                kind: what.to_owned(),
            });
        }
    }
    for (comps, mode, mtime) in dirs.iter().rev() {
        let shown: PathBuf = comps.iter().fold(to.dir.to_owned(), |p, c| p.join(c));
        let fd = if comps.is_empty() {
            rustix::io::dup(&base).map_err(|e| failed(&shown, e))?
        } else {
            let parent = parent_of(&base, comps, to.dir)?;
            open_dir(&parent, &comps[comps.len() - 1], &shown)?
        };
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode | 0o700))
            .map_err(|e| failed(&shown, e))?;
        rustix::fs::futimens(&fd, &times(*mtime)).map_err(|e| failed(&shown, e))?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive with a file, a directory, and what a box may plant: a symlink out, a
    /// hard link to a file outside, a device, and a path with `..`.
    fn planted(with_dotdot: bool) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h.clone(), "w", std::io::empty())
            .expect("dir");
        let mut f = tar::Header::new_gnu();
        f.set_mode(0o4755);
        f.set_size(3);
        b.append_data(&mut f, "w/a.txt", &b"one"[..]).expect("file");
        let mut l = tar::Header::new_gnu();
        l.set_entry_type(tar::EntryType::Symlink);
        l.set_size(0);
        b.append_link(&mut l, "w/evil", "/etc").expect("symlink");
        let mut hl = tar::Header::new_gnu();
        hl.set_entry_type(tar::EntryType::Link);
        hl.set_size(0);
        b.append_link(&mut hl, "w/hard", "/etc/passwd")
            .expect("hard link");
        let mut d = tar::Header::new_gnu();
        d.set_entry_type(tar::EntryType::Char);
        d.set_size(0);
        b.append_data(&mut d, "w/null", std::io::empty())
            .expect("device");
        if with_dotdot {
            let mut x = tar::Header::new_gnu();
            x.set_size(1);
            x.set_mode(0o644);
            // `append_data` refuses `..`: write the name into the header directly.
            x.as_gnu_mut().expect("gnu").name[..11].copy_from_slice(b"w/../../esc");
            x.set_cksum();
            b.append(&x, &b"x"[..]).expect("escape");
        }
        b.into_inner().expect("tar")
    }

    #[test]
    fn only_files_and_directories_are_made_and_links_and_devices_are_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dest = tmp.path().join("dest");
        std::fs::create_dir(&dest).expect("mkdir");
        let to = Target {
            dir: &dest,
            root: Some(("w", "copy")),
        };
        let done = unpack(&planted(false)[..], &to, 1 << 20).expect("unpack");
        assert_eq!((done.files, done.dirs, done.bytes), (1, 1, 3));
        let kinds: Vec<&str> = done.skipped.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(kinds, ["symlink", "hard link", "device"]);
        assert_eq!(std::fs::read(dest.join("copy/a.txt")).expect("a"), b"one");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dest.join("copy/a.txt"))
                .expect("meta")
                .permissions(),
        );
        assert_eq!(mode & 0o7777, 0o755, "setuid dropped");
        let names: Vec<_> = std::fs::read_dir(dest.join("copy"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["a.txt"]);
    }

    #[test]
    fn a_path_leaving_the_destination_or_a_symlink_on_the_way_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dest = tmp.path().join("dest");
        std::fs::create_dir(&dest).expect("mkdir");
        let to = Target {
            dir: &dest,
            root: Some(("w", "copy")),
        };
        let e = unpack(&planted(true)[..], &to, 1 << 20).expect_err("refused");
        assert!(e.to_string().contains("leaves the destination"), "{e}");
        assert!(!tmp.path().join("esc").exists());

        // A symlink already in the destination is not walked through.
        let out = tmp.path().join("outside");
        std::fs::create_dir(&out).expect("mkdir");
        let dest2 = tmp.path().join("dest2");
        std::fs::create_dir(&dest2).expect("mkdir");
        std::os::unix::fs::symlink(&out, dest2.join("copy")).expect("symlink");
        let to = Target {
            dir: &dest2,
            root: Some(("w", "copy")),
        };
        let e = unpack(&planted(false)[..], &to, 1 << 20).expect_err("refused");
        assert!(e.to_string().contains("not followed"), "{e}");
        assert_eq!(std::fs::read_dir(&out).expect("ls").count(), 0);

        // Over the cap: refused, with the cap named.
        let dest3 = tmp.path().join("dest3");
        std::fs::create_dir(&dest3).expect("mkdir");
        let to = Target {
            dir: &dest3,
            root: Some(("w", "copy")),
        };
        let e = unpack(&planted(false)[..], &to, 2).expect_err("capped");
        assert!(e.to_string().contains("size cap of 2 bytes"), "{e}");
    }
}
