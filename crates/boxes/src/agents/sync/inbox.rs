//! The in-box half of an agent's configuration sync ([`super::COMMAND`], run as a box
//! process): the host's mirror (read-only at `/run/agentbox/ctl/agent-config/<agent>/`) is
//! copied over the box's own copy of the agent's configuration (in its home, versioned with
//! the box), where a file's size or mtime differs from the manifest's. No copy is shared
//! between boxes: what one box's agent writes (a hook, a setting, a login) stays in that box.
//!
//! The destination is box-controlled, so every write is resolved below its root with no
//! symlink followed: directories are opened one component at a time with `O_NOFOLLOW`, and a
//! symlink or file where a directory belongs is replaced (a box of an earlier version has its
//! links to the former shared copy replaced so). Files are written to a temporary name and
//! renamed into place, so a concurrent reader sees the old file or the new, never half of
//! one.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};
use serde::{Deserialize, Serialize};

use super::{Entry, Manifest, Synced, MERGED};

/// What the in-box half is asked to do (the command's one argument, JSON).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Plan {
    /// The host's mirror, as the box sees it.
    pub mirror: PathBuf,
    /// The mirror's manifest (see [`Manifest`]).
    pub manifest: PathBuf,
    /// The box's home (`/root`).
    pub home: PathBuf,
    /// The agent's configuration roots, relative to the home (`.claude`, `.claude.json`).
    pub roots: Vec<String>,
}

/// What the in-box half did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Done {
    #[serde(flatten)]
    pub synced: Synced,
}

/// Run `plan` (inside the box).
pub fn run(plan: &Plan) -> Result<Done, String> {
    let text = std::fs::read_to_string(&plan.manifest)
        .map_err(|e| format!("{}: {e}", plan.manifest.display()))?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", plan.manifest.display()))?;
    let mut home = Tree::open(&plan.home)?;
    let mut done = Done::default();
    for entry in &manifest.files {
        if !plan
            .roots
            .iter()
            .any(|r| Path::new(&entry.path).starts_with(r.as_str()))
        {
            continue;
        }
        let from = plan.mirror.join(&entry.path);
        if home
            .put(Path::new(&entry.path), &from, entry)
            .map_err(|e| format!("{}: {e}", entry.path))?
        {
            done.synced.copied += 1;
        } else {
            done.synced.unchanged += 1;
        }
    }
    Ok(done)
}

/// A directory tree written below its root only.
struct Tree {
    /// Open directories by path relative to the root (`""`: the root).
    dirs: HashMap<PathBuf, OwnedFd>,
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

impl Tree {
    fn open(root: &Path) -> Result<Tree, String> {
        std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{}: {e}", root.display()))?;
        let mut dirs = HashMap::new();
        dirs.insert(PathBuf::new(), fd);
        Ok(Tree { dirs })
    }

    /// The directory `rel` (made when missing; a non-directory there is replaced by one).
    fn dir(&mut self, rel: &Path) -> io::Result<&OwnedFd> {
        if !self.dirs.contains_key(rel) {
            let mut at = PathBuf::new();
            for c in rel.components() {
                let Component::Normal(name) = c else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is not a plain relative path", rel.display()),
                    ));
                };
                let next = at.join(name);
                if !self.dirs.contains_key(&next) {
                    let parent = self.dirs.get(&at).expect("each ancestor is opened first");
                    let fd = open_or_make_dir(parent, name)?;
                    self.dirs.insert(next.clone(), fd);
                }
                at = next;
            }
        }
        Ok(self.dirs.get(rel).expect("opened above"))
    }

    /// Make `rel` hold mirror file `from` (whose manifest entry is `entry`) unless it already
    /// does (same size and mtime); returns whether it wrote.
    fn put(&mut self, rel: &Path, from: &Path, entry: &Entry) -> io::Result<bool> {
        let (parent, name) = agentbox_core::at::split(rel)?;
        let merged = MERGED.iter().any(|m| Path::new(m) == rel);
        let pfd = self.dir(parent)?;
        let existing = rustix::fs::statat(pfd, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        let is_file = existing.as_ref().is_some_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        });
        if merged && is_file {
            // Host wins key by key; what only the box's copy has stays.
            let host = fs_err::read_to_string(from)?;
            let boxed = read_at(pfd, name)?;
            if let Some(text) = super::super::sanitize::merge_toml(&host, &boxed) {
                if text == boxed {
                    return Ok(false);
                }
                write_at(pfd, name, &mut text.as_bytes(), entry.mode, None)?;
                return Ok(true);
            }
        }
        if let Some(st) = existing.as_ref().filter(|_| is_file) {
            if st.st_size as u64 == entry.size
                && st.st_mtime == entry.mtime
                && st.st_mtime_nsec as u32 == entry.nsec
            {
                return Ok(false);
            }
        }
        if existing.is_some() && !is_file {
            agentbox_core::at::remove(pfd, name)?;
        }
        let mut input = fs_err::File::open(from)?;
        write_at(
            pfd,
            name,
            &mut input,
            entry.mode,
            Some((entry.mtime, entry.nsec)),
        )?;
        Ok(true)
    }
}

fn open_or_make_dir(parent: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<OwnedFd> {
    match agentbox_core::at::open_dir(parent, name) {
        Ok(fd) => return Ok(fd),
        Err(rustix::io::Errno::NOENT) => {}
        // A symlink or a file where a directory belongs: replaced (never followed).
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
            agentbox_core::at::remove(parent, name)?
        }
        Err(e) => return Err(errno(e)),
    }
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(errno(e)),
    }
    agentbox_core::at::open_dir(parent, name).map_err(errno)
}

fn read_at(parent: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<String> {
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    io::read_to_string(std::fs::File::from(fd))
}

/// Write `content` to `name` in `parent` through a temporary name and a rename.
fn write_at(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    content: &mut dyn io::Read,
    mode: u32,
    mtime: Option<(i64, u32)>,
) -> io::Result<()> {
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    // Unique per writer: launches in several boxes sync one shared copy at once.
    tmp.push(format!(
        ".agentbox-sync.{}-{}",
        std::process::id(),
        &agentbox_core::id::new_id()[..8]
    ));
    let fd = rustix::fs::openat(
        parent,
        &tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode & 0o7777),
    )
    .map_err(errno)?;
    let mut out = std::fs::File::from(fd);
    let written = io::copy(content, &mut out).and_then(|_| {
        rustix::fs::fchmod(&out, Mode::from_raw_mode(mode & 0o777)).map_err(errno)?;
        if let Some((sec, nsec)) = mtime {
            let t = Timespec {
                tv_sec: sec,
                tv_nsec: nsec.into(),
            };
            rustix::fs::futimens(
                &out,
                &Timestamps {
                    last_access: t,
                    last_modification: t,
                },
            )
            .map_err(errno)?;
        }
        Ok(())
    });
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(parent, &tmp, AtFlags::empty());
        return Err(e);
    }
    rustix::fs::renameat(parent, &tmp, parent, name).map_err(errno)
}
