//! The in-box half of an agent's configuration sync ([`super::COMMAND`], run as a box
//! process): the host's mirror (read-only at `/run/agentbox/ctl/agent-config/<agent>/`) is
//! copied over the agent's copy — the shared one of the home (`/run/agentbox/agent-home/
//! <agent>/`, reached from the box's home by symlinks made here) or the box's own (its
//! home, `--isolate-config`) — where a file's size or mtime differs from the manifest's.
//!
//! The destination is box-controlled (and a shared copy is writable by every box of the
//! home), so every write is resolved below its root with no symlink followed: directories are
//! opened one component at a time with `O_NOFOLLOW`, and a symlink or file where a directory
//! belongs is replaced. Files are written to a temporary name and renamed into place, so a
//! concurrent reader (another box's agent) sees the old file or the new, never half of one.

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
    /// Where the home's shared copies are mounted (`/run/agentbox/agent-home`; `None`: the
    /// box keeps its own, in its home). This agent's is its directory `agent` there.
    pub shared: Option<PathBuf>,
    pub agent: String,
    /// The agent's configuration roots, relative to the home (`.claude`, `.claude.json`).
    pub roots: Vec<String>,
}

/// What the in-box half did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Done {
    #[serde(flatten)]
    pub synced: Synced,
    /// Roots the box keeps its own copy of although a shared one was asked for: they were
    /// there, as real files, before the first shared launch (nothing of the box's is
    /// replaced or moved).
    #[serde(default)]
    pub own: Vec<String>,
}

/// Run `plan` (inside the box).
pub fn run(plan: &Plan) -> Result<Done, String> {
    let text = std::fs::read_to_string(&plan.manifest)
        .map_err(|e| format!("{}: {e}", plan.manifest.display()))?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", plan.manifest.display()))?;
    let mut home = Tree::open(&plan.home)?;
    // The agent's directory of the mount is the other boxes' to change too: opened without
    // following a symlink.
    let shared_dir = plan.shared.as_ref().map(|m| m.join(&plan.agent));
    let mut shared = match &plan.shared {
        Some(mount) => Some(Tree::open(mount)?.below(&plan.agent)?),
        None => None,
    };
    let mut done = Done::default();
    // Where each root's files go: the shared copy (linked from the home), or the home.
    let mut into_shared: HashMap<&str, bool> = HashMap::new();
    for root in &plan.roots {
        let linked = match (&shared_dir, shared.as_mut()) {
            (Some(dir), Some(tree)) => match home.link(root, &dir.join(root))? {
                Linked::Yes => {
                    // A directory the host has none of yet is made, so the link is not left
                    // dangling (an agent's `mkdir -p` would fail on it); a missing file is
                    // made by the agent's first write, through the link.
                    if is_dir_root(root, &manifest) {
                        let at = tree.root.join(root);
                        tree.dir(Path::new(root))
                            .map_err(|e| format!("{}: {e}", at.display()))?;
                    }
                    true
                }
                Linked::Own => {
                    done.own.push(root.clone());
                    false
                }
            },
            _ => false,
        };
        into_shared.insert(root.as_str(), linked);
    }
    for entry in &manifest.files {
        let root = plan
            .roots
            .iter()
            .find(|r| Path::new(&entry.path).starts_with(r.as_str()));
        let Some(root) = root else { continue };
        let tree = match (into_shared.get(root.as_str()), shared.as_mut()) {
            (Some(true), Some(s)) => s,
            _ => &mut home,
        };
        let from = plan.mirror.join(&entry.path);
        if tree
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

/// Whether configuration root `root` is a directory: as the mirror has it, else as its name
/// says (`.claude`, `.config/opencode`: directories; `.claude.json`: a file).
fn is_dir_root(root: &str, manifest: &Manifest) -> bool {
    if manifest.files.iter().any(|e| e.path == root) {
        return false;
    }
    if manifest
        .files
        .iter()
        .any(|e| Path::new(&e.path).starts_with(root))
    {
        return true;
    }
    let name = root.rsplit('/').next().unwrap_or(root);
    !name.trim_start_matches('.').contains('.')
}

enum Linked {
    /// The home's entry is (now) the symlink to the shared copy.
    Yes,
    /// The home has its own entry there.
    Own,
}

/// A directory tree written below its root only.
struct Tree {
    root: PathBuf,
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
        Ok(Tree {
            root: root.to_owned(),
            dirs,
        })
    }

    /// The tree of directory `name` of this one (made when missing, never a symlink's).
    fn below(mut self, name: &str) -> Result<Tree, String> {
        let fd = self
            .dir(Path::new(name))
            .and_then(|fd| fd.try_clone())
            .map_err(|e| format!("{}: {e}", self.root.join(name).display()))?;
        let mut dirs = HashMap::new();
        dirs.insert(PathBuf::new(), fd);
        Ok(Tree {
            root: self.root.join(name),
            dirs,
        })
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

    /// Make the home's `rel` a symlink to `target` unless the home has its own entry there.
    fn link(&mut self, rel: &str, target: &Path) -> Result<Linked, String> {
        let (parent, name) =
            agentbox_core::at::split(Path::new(rel)).map_err(|e| format!("{rel}: {e}"))?;
        let pfd = self.dir(parent).map_err(|e| format!("{rel}: {e}"))?;
        // `Some(true)`: our link; `Some(false)`: the box's own entry (a symlink elsewhere is
        // the box's own choice too); `None`: nothing there.
        let ours = |pfd: &OwnedFd| match rustix::fs::readlinkat(pfd, name, Vec::new()) {
            Ok(t) => Some(Path::new(std::ffi::OsStr::from_bytes(t.as_bytes())) == target),
            Err(rustix::io::Errno::NOENT) => None,
            Err(_) => Some(false),
        };
        match ours(pfd) {
            Some(true) => return Ok(Linked::Yes),
            Some(false) => return Ok(Linked::Own),
            None => {}
        }
        match rustix::fs::symlinkat(target, pfd, name) {
            Ok(()) => Ok(Linked::Yes),
            // Another launch in this box made it meanwhile: as if it had been there.
            Err(rustix::io::Errno::EXIST) if ours(pfd) == Some(true) => Ok(Linked::Yes),
            Err(rustix::io::Errno::EXIST) => Ok(Linked::Own),
            Err(e) => Err(format!("{}: {e}", self.root.join(rel).display())),
        }
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

use std::os::unix::ffi::OsStrExt;

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
