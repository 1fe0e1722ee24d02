//! Layers: what a node stores in a bundle, how it is planned into tar entries, and how a
//! staged layer is applied onto a tree or converted to and from overlayfs form.
//!
//! One file (over 600 lines): planning, applying and converting a layer share its whiteout
//! and opaque-directory encoding, which must stay identical in all three.
//!
//! A layer is OCI image-layer style: the entries that differ from the base tree, a deletion
//! as an empty regular file `.wh.<name>`, an opaque directory (its lower contents hidden) as
//! an empty regular file `<dir>/.wh..wh..opq`. Every layer starts with its root directory and
//! every entry's parent directory precedes it, so applying a layer restores the metadata of
//! each directory it touches.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::format::{OPAQUE_MARKER, OVERLAY_OPAQUE_XATTR, WHITEOUT_PREFIX};
use super::fsutil;
use crate::fsops::copy::{copy_entry, CopyOpts};
use crate::fsops::diff::same_bytes;
use crate::fsops::scan::{read_meta, scan_tree};
use crate::fsops::{Entry, Kind, Meta, Tree};
use crate::{Error, Result};

/// A layer to write into a bundle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerSource {
    /// Entries, parents before children, the root (empty `rel`) first. `Entry::src` is where
    /// the content is read.
    pub entries: Vec<Entry>,
    /// Paths deleted relative to the base.
    pub whiteouts: Vec<PathBuf>,
    /// Directories whose base contents are hidden.
    pub opaque_dirs: Vec<PathBuf>,
}

/// Entry count and checksum of a layer, as `end.json` records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSummary {
    pub entries: u64,
    pub checksum: String,
}

/// What one planned tar entry is.
#[derive(Debug, Clone)]
pub(crate) enum PlanKind {
    File {
        src: PathBuf,
    },
    Dir,
    Symlink(PathBuf),
    /// Hardlink to an earlier entry of the same layer (relative path).
    HardLink(PathBuf),
    Fifo,
    /// Stored as a fifo entry marked `AGENTBOX.type=socket` (history/snapshot only).
    Socket,
    CharDev,
    BlockDev,
    /// A whiteout or opaque marker: an empty regular file.
    Marker,
}

/// One tar entry to write, in order.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub rel: PathBuf,
    pub kind: PlanKind,
    pub meta: Meta,
}

/// Record type byte of a socket. Its tar entry has the fifo type flag, so the record needs
/// its own byte for the checksum to tell the two apart.
pub(crate) const SOCKET_RECORD_TYPE: u8 = b's';

/// Mode of a marker file.
pub(crate) const MARKER_PERM: u32 = 0o600;

fn marker_meta() -> Meta {
    Meta {
        kind: Kind::File,
        perm: MARKER_PERM,
        uid: 0,
        gid: 0,
        size: 0,
        mtime_sec: 0,
        mtime_nsec: 0,
        ctime_sec: 0,
        ctime_nsec: 0,
        btime: None,
        dev: 0,
        ino: 0,
        nlink: 1,
        rdev: 0,
        target: None,
        xattrs: BTreeMap::new(),
    }
}

/// The canonical description of one tar entry that the node checksum covers: everything
/// but the content (which the per-file `AGENTBOX.blake3` record covers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub rel: Vec<u8>,
    /// Tar type flag: `0` file, `1` hardlink, `2` symlink, `3` char, `4` block, `5` dir, `6` fifo;
    /// [`SOCKET_RECORD_TYPE`] for a socket (a fifo entry in the archive).
    pub typ: u8,
    pub perm: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub size: u64,
    pub link: Vec<u8>,
    pub major: u32,
    pub minor: u32,
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

impl Record {
    pub(crate) fn hash_into(&self, h: &mut blake3::Hasher) {
        fn bytes(h: &mut blake3::Hasher, b: &[u8]) {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        }
        bytes(h, &self.rel);
        h.update(&[self.typ]);
        h.update(&self.perm.to_le_bytes());
        h.update(&self.uid.to_le_bytes());
        h.update(&self.gid.to_le_bytes());
        h.update(&self.mtime_sec.to_le_bytes());
        h.update(&self.mtime_nsec.to_le_bytes());
        h.update(&self.size.to_le_bytes());
        bytes(h, &self.link);
        h.update(&self.major.to_le_bytes());
        h.update(&self.minor.to_le_bytes());
        h.update(&(self.xattrs.len() as u64).to_le_bytes());
        for (k, v) in &self.xattrs {
            bytes(h, k.as_bytes());
            bytes(h, v);
        }
    }
}

impl Planned {
    pub(crate) fn typ(&self) -> u8 {
        match self.kind {
            PlanKind::File { .. } | PlanKind::Marker => b'0',
            PlanKind::HardLink(_) => b'1',
            PlanKind::Symlink(_) => b'2',
            PlanKind::CharDev => b'3',
            PlanKind::BlockDev => b'4',
            PlanKind::Dir => b'5',
            PlanKind::Fifo | PlanKind::Socket => b'6',
        }
    }

    /// Type byte of the entry's record: the tar type flag, except for sockets.
    pub(crate) fn record_typ(&self) -> u8 {
        match self.kind {
            PlanKind::Socket => SOCKET_RECORD_TYPE,
            _ => self.typ(),
        }
    }

    pub(crate) fn record(&self) -> Record {
        let (major, minor) = match self.kind {
            PlanKind::CharDev | PlanKind::BlockDev => (
                rustix::fs::major(self.meta.rdev),
                rustix::fs::minor(self.meta.rdev),
            ),
            _ => (0, 0),
        };
        let link = match &self.kind {
            PlanKind::Symlink(t) | PlanKind::HardLink(t) => t.as_os_str().as_bytes().to_vec(),
            _ => Vec::new(),
        };
        let size = match self.kind {
            PlanKind::File { .. } => self.meta.size,
            _ => 0,
        };
        let xattrs = match self.kind {
            PlanKind::HardLink(_) | PlanKind::Marker => BTreeMap::new(),
            _ => self.meta.xattrs.clone(),
        };
        Record {
            rel: self.rel.as_os_str().as_bytes().to_vec(),
            typ: self.record_typ(),
            perm: self.meta.perm & 0o7777,
            uid: u64::from(self.meta.uid),
            gid: u64::from(self.meta.gid),
            mtime_sec: self.meta.mtime_sec,
            mtime_nsec: self.meta.mtime_nsec,
            size,
            link,
            major,
            minor,
            xattrs,
        }
    }
}

fn is_plain_rel(rel: &Path) -> bool {
    rel.components().all(|c| matches!(c, Component::Normal(_)))
}

fn parent_rel(rel: &Path) -> PathBuf {
    rel.parent().map(Path::to_owned).unwrap_or_default()
}

/// Plans tree entries into tar entries one at a time, in archive order (root first, each
/// parent before its children), checking the layer rules and detecting in-tree hardlinks:
/// what [`plan_entries`] does for a whole list, for an export that writes each entry as
/// its tree is read. Sockets are planned when `sockets` is set (history/snapshot) and
/// skipped otherwise (rootfs).
pub(crate) struct Planner {
    sockets: bool,
    first: bool,
    dirs: HashSet<PathBuf>,
    seen: HashSet<PathBuf>,
    inodes: HashMap<(u64, u64), PathBuf>,
}

impl Planner {
    pub(crate) fn new(sockets: bool) -> Planner {
        Planner {
            sockets,
            first: true,
            dirs: HashSet::new(),
            seen: HashSet::new(),
            inodes: HashMap::new(),
        }
    }

    /// The tar entry of `e`, `None` for a socket that is skipped; an error says which rule
    /// `e` breaks.
    pub(crate) fn entry(&mut self, e: &Entry) -> std::result::Result<Option<Planned>, String> {
        if e.meta.kind == Kind::Socket && !self.sockets {
            return Ok(None);
        }
        if std::mem::take(&mut self.first) {
            if !e.rel.as_os_str().is_empty() || e.meta.kind != Kind::Dir {
                return Err(format!(
                    "the first entry must be the root directory, not {:?}",
                    e.rel
                ));
            }
        } else {
            if e.rel.as_os_str().is_empty() || !is_plain_rel(&e.rel) {
                return Err(format!(
                    "entry path {:?} is not a plain relative path",
                    e.rel
                ));
            }
            if !self.dirs.contains(&parent_rel(&e.rel)) {
                return Err(format!(
                    "entry {:?} comes before (or without) its parent directory",
                    e.rel
                ));
            }
            if e.rel
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(WHITEOUT_PREFIX.as_bytes()))
            {
                return Err(format!(
                    "entry {:?} has a name starting with {WHITEOUT_PREFIX}, reserved for markers",
                    e.rel
                ));
            }
        }
        if !self.seen.insert(e.rel.clone()) {
            return Err(format!("entry {:?} is listed twice", e.rel));
        }
        let kind = match e.meta.kind {
            Kind::Dir => {
                self.dirs.insert(e.rel.clone());
                PlanKind::Dir
            }
            k => match self.inodes.get(&(e.meta.dev, e.meta.ino)) {
                Some(first) if e.meta.nlink > 1 => PlanKind::HardLink(first.clone()),
                _ => {
                    if e.meta.nlink > 1 {
                        self.inodes.insert((e.meta.dev, e.meta.ino), e.rel.clone());
                    }
                    match k {
                        Kind::File => PlanKind::File { src: e.src.clone() },
                        Kind::Symlink => PlanKind::Symlink(
                            e.meta
                                .target
                                .clone()
                                .ok_or_else(|| format!("symlink {:?} has no target", e.rel))?,
                        ),
                        Kind::Fifo => PlanKind::Fifo,
                        Kind::Socket => PlanKind::Socket,
                        Kind::CharDev => PlanKind::CharDev,
                        _ => PlanKind::BlockDev,
                    }
                }
            },
        };
        Ok(Some(Planned {
            rel: e.rel.clone(),
            kind,
            meta: e.meta.clone(),
        }))
    }
}

/// Plan the tar entries of a list of tree entries (root first), detecting in-tree hardlinks.
/// `whiteouts` and `opaque_dirs` add markers (history/snapshot layers). Sockets are planned
/// when `sockets` is set (history/snapshot) and skipped otherwise (rootfs).
pub(crate) fn plan_entries<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    whiteouts: &[PathBuf],
    opaque_dirs: &[PathBuf],
    sockets: bool,
) -> std::result::Result<Vec<Planned>, String> {
    let mut out = Vec::new();
    let mut planner = Planner::new(sockets);
    for e in entries {
        out.extend(planner.entry(e)?);
    }
    let Planner { dirs, mut seen, .. } = planner;
    let mut marker = |dir: &Path, name: Vec<u8>, what: &str| -> std::result::Result<(), String> {
        if !dirs.contains(dir) {
            return Err(format!(
                "{what} in {dir:?}: that directory is not an entry of the layer"
            ));
        }
        let rel = dir.join(std::ffi::OsStr::from_bytes(&name));
        if !seen.insert(rel.clone()) {
            return Err(format!("marker {rel:?} is listed twice"));
        }
        out.push(Planned {
            rel,
            kind: PlanKind::Marker,
            meta: marker_meta(),
        });
        Ok(())
    };
    for w in whiteouts {
        let Some(name) = w.file_name() else {
            return Err(format!("whiteout {w:?} has no file name"));
        };
        if !is_plain_rel(w) {
            return Err(format!("whiteout {w:?} is not a plain relative path"));
        }
        let mut n = WHITEOUT_PREFIX.as_bytes().to_vec();
        n.extend_from_slice(name.as_bytes());
        marker(&parent_rel(w), n, "whiteout")?;
    }
    for d in opaque_dirs {
        if !is_plain_rel(d) {
            return Err(format!("opaque dir {d:?} is not a plain relative path"));
        }
        marker(d, OPAQUE_MARKER.as_bytes().to_vec(), "opaque marker")?;
    }
    Ok(out)
}

/// Plan `layer` into its tar entries (metadata only, no content); a malformed layer is an
/// error naming `path`.
pub(crate) fn plan_layer_at(layer: &LayerSource, path: &Path) -> Result<Vec<Planned>> {
    plan_entries(&layer.entries, &layer.whiteouts, &layer.opaque_dirs, true).map_err(|message| {
        Error::Bundle {
            path: path.to_owned(),
            message,
        }
    })
}

/// Entry count and checksum of a layer, as `end.json` records them.
pub fn layer_summary(layer: &LayerSource) -> Result<LayerSummary> {
    plan_layer_at(layer, Path::new("<layer>")).map(|p| summary_of(&p))
}

fn summary_of(planned: &[Planned]) -> LayerSummary {
    let mut sum = Summing::default();
    for p in planned {
        sum.add(p);
    }
    sum.finish()
}

/// A [`LayerSummary`] made one entry at a time, in archive order.
#[derive(Default)]
pub(crate) struct Summing {
    hasher: blake3::Hasher,
    entries: u64,
}

impl Summing {
    pub(crate) fn add(&mut self, p: &Planned) {
        p.record().hash_into(&mut self.hasher);
        self.entries += 1;
    }

    pub(crate) fn finish(&self) -> LayerSummary {
        LayerSummary {
            entries: self.entries,
            checksum: self.hasher.finalize().to_hex().to_string(),
        }
    }
}

fn same_meta(a: &Meta, b: &Meta) -> bool {
    a.kind == b.kind
        && a.perm == b.perm
        && a.uid == b.uid
        && a.gid == b.gid
        && a.mtime_sec == b.mtime_sec
        && a.mtime_nsec == b.mtime_nsec
        && a.target == b.target
        && a.xattrs == b.xattrs
        && (a.kind == Kind::Dir || a.size == b.size)
        && (!matches!(a.kind, Kind::CharDev | Kind::BlockDev) || a.rdev == b.rdev)
}

/// Whether `a` and `b` are one file seen through two snapshots of a subvolume: btrfs gives
/// each snapshot a device number of its own but keeps inode numbers and change times, and
/// any write to the file in between would have moved its change time (which no system call
/// can set back). Spares reading both copies of every file when the history of a btrfs
/// environment is exported.
fn same_inode_unchanged(a: &Meta, b: &Meta) -> bool {
    a.ino == b.ino && (a.ctime_sec, a.ctime_nsec) == (b.ctime_sec, b.ctime_nsec) && !a.born_apart(b)
}

/// The layer that turns `base` into `tree` (`base: None`: the complete tree). Entries that
/// differ (metadata, or content when the metadata is equal but the inode differs) are
/// included with all their ancestors; every member of a hardlink group with a changed
/// member is included; deletions become whiteouts at their topmost deleted path.
pub fn layer_from_trees(base: Option<&Tree>, tree: &Tree) -> Result<LayerSource> {
    let Some(base) = base else {
        return Ok(LayerSource {
            entries: tree.entries.values().cloned().collect(),
            whiteouts: Vec::new(),
            opaque_dirs: Vec::new(),
        });
    };
    let mut include: BTreeSet<PathBuf> = BTreeSet::new();
    let mut changed_inodes: HashSet<(u64, u64)> = HashSet::new();
    for (rel, e) in &tree.entries {
        let changed = match base.entries.get(rel) {
            None => true,
            Some(b) if !same_meta(&b.meta, &e.meta) => true,
            Some(b) => {
                e.meta.kind == Kind::File
                    && (b.meta.dev, b.meta.ino) != (e.meta.dev, e.meta.ino)
                    && !same_inode_unchanged(&b.meta, &e.meta)
                    && b.src != e.src
                    && !same_bytes(&b.src, &e.src).map_err(|err| Error::Bundle {
                        path: e.src.clone(),
                        message: format!("comparing with {}: {err}", b.src.display()),
                    })?
            }
        };
        if changed {
            include.insert(rel.clone());
            if e.meta.kind != Kind::Dir && e.meta.nlink > 1 {
                changed_inodes.insert((e.meta.dev, e.meta.ino));
            }
        }
    }
    for (rel, e) in &tree.entries {
        if e.meta.kind != Kind::Dir
            && e.meta.nlink > 1
            && changed_inodes.contains(&(e.meta.dev, e.meta.ino))
        {
            include.insert(rel.clone());
        }
    }
    let mut whiteouts = Vec::new();
    for (rel, b) in &base.entries {
        if rel.as_os_str().is_empty() || tree.entries.contains_key(rel) {
            continue;
        }
        let parent = parent_rel(rel);
        let parent_kept = tree
            .entries
            .get(&parent)
            .is_some_and(|p| p.meta.kind == Kind::Dir)
            && base
                .entries
                .get(&parent)
                .is_some_and(|p| p.meta.kind == Kind::Dir);
        let _ = b;
        if parent_kept {
            whiteouts.push(rel.clone());
            include.insert(parent);
        }
    }
    // Ancestors, the root included.
    let mut all: BTreeSet<PathBuf> = BTreeSet::new();
    all.insert(PathBuf::new());
    for rel in &include {
        let mut p = Some(rel.as_path());
        while let Some(q) = p {
            all.insert(q.to_owned());
            p = q.parent();
        }
    }
    let entries = all
        .iter()
        .filter_map(|rel| tree.entries.get(rel).cloned())
        .collect();
    Ok(LayerSource {
        entries,
        whiteouts,
        opaque_dirs: Vec::new(),
    })
}

/// An error applying a staged layer at `path`: [`Error::NoSpace`] when the filesystem is
/// full (the archive is not to blame for that), else a bundle error.
fn apply_err<E: std::fmt::Display + 'static>(path: &Path, what: &str, e: E) -> Error {
    let any: &dyn std::any::Any = &e;
    let no_space = any
        .downcast_ref::<io::Error>()
        .is_some_and(crate::error::io_is_no_space)
        || any.downcast_ref::<Error>().is_some_and(Error::is_no_space);
    if no_space {
        return Error::NoSpace {
            path: path.to_owned(),
            detail: format!("applying layer: {what}: {e}"),
        };
    }
    Error::Bundle {
        path: path.to_owned(),
        message: format!("applying layer: {what}: {e}"),
    }
}

/// Apply a staged OCI-style layer onto the complete tree at `target`, in place: a whiteout
/// removes its path, an opaque marker empties its directory first, any other entry replaces
/// what is there (a directory over a directory merges), with full fidelity. Symlinks in
/// `target` are never followed.
pub fn apply_layer(staged: &Path, target: &Path) -> Result<()> {
    let tmd = std::fs::symlink_metadata(target).map_err(|e| apply_err(target, "target", e))?;
    if !tmd.is_dir() {
        return Err(apply_err(target, "target", "not a directory"));
    }
    let mut links = HashMap::new();
    apply_dir(staged, target, &mut links)?;
    let meta = read_meta(staged).map_err(|e| apply_err(staged, "reading", e))?;
    fsutil::apply_meta(target, &meta, fsutil::is_root(), true)
        .map_err(|e| apply_err(target, "setting metadata", e))
}

fn sorted_children(dir: &Path) -> Result<Vec<std::ffi::OsString>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| apply_err(dir, "reading directory", e))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()
        .map_err(|e| apply_err(dir, "reading directory", e))?;
    names.sort();
    Ok(names)
}

fn apply_dir(staged: &Path, target: &Path, links: &mut HashMap<(u64, u64), PathBuf>) -> Result<()> {
    let names = sorted_children(staged)?;
    let root = fsutil::is_root();
    // Owners only as root; reflinks from the staged layer when the filesystem allows.
    let copy_opts = CopyOpts {
        reflink: true,
        ignore_owner_errors: !root,
        ..CopyOpts::default()
    };
    if names
        .iter()
        .any(|n| n.as_bytes() == OPAQUE_MARKER.as_bytes())
    {
        for n in sorted_children(target)? {
            let p = target.join(&n);
            fsutil::remove_any(&p).map_err(|e| apply_err(&p, "emptying opaque directory", e))?;
        }
    }
    for n in &names {
        let b = n.as_bytes();
        if b != OPAQUE_MARKER.as_bytes() && b.starts_with(WHITEOUT_PREFIX.as_bytes()) {
            let victim = target.join(std::ffi::OsStr::from_bytes(&b[WHITEOUT_PREFIX.len()..]));
            fsutil::remove_any(&victim).map_err(|e| apply_err(&victim, "whiteout", e))?;
        }
    }
    for n in &names {
        if n.as_bytes().starts_with(WHITEOUT_PREFIX.as_bytes()) {
            continue;
        }
        let s = staged.join(n);
        let t = target.join(n);
        let meta = read_meta(&s).map_err(|e| apply_err(&s, "reading", e))?;
        let existing = match std::fs::symlink_metadata(&t) {
            Ok(md) => Some(md),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(apply_err(&t, "lstat", e)),
        };
        if meta.kind == Kind::Dir {
            match existing {
                Some(md) if md.is_dir() => {}
                Some(_) => {
                    fsutil::remove_any(&t).map_err(|e| apply_err(&t, "replacing", e))?;
                    std::fs::create_dir(&t).map_err(|e| apply_err(&t, "mkdir", e))?;
                }
                None => std::fs::create_dir(&t).map_err(|e| apply_err(&t, "mkdir", e))?,
            }
            apply_dir(&s, &t, links)?;
            fsutil::apply_meta(&t, &meta, root, true)
                .map_err(|e| apply_err(&t, "setting metadata", e))?;
            continue;
        }
        if existing.is_some() {
            fsutil::remove_any(&t).map_err(|e| apply_err(&t, "replacing", e))?;
        }
        if meta.nlink > 1 {
            if let Some(first) = links.get(&(meta.dev, meta.ino)) {
                std::fs::hard_link(first, &t).map_err(|e| apply_err(&t, "hardlink", e))?;
                continue;
            }
            links.insert((meta.dev, meta.ino), t.clone());
        }
        let entry = Entry {
            rel: PathBuf::from(n),
            src: s,
            meta,
        };
        copy_entry(&entry, &t, &copy_opts).map_err(|e| apply_err(&t, "copying", e))?;
    }
    Ok(())
}

/// Convert the markers of a staged layer in place into overlayfs form: `.wh.x` becomes a
/// 0/0 character device `x`, `.wh..wh..opq` becomes `trusted.overlay.opaque=y` on its
/// directory. Needs root. Directory mtimes are kept. A root opaque marker is refused.
pub fn to_overlay_layer(staged: &Path) -> Result<()> {
    let mut markers = Vec::new();
    for e in walkdir::WalkDir::new(staged).follow_links(false) {
        let e = e.map_err(|e| apply_err(staged, "walking", e))?;
        if e.file_type().is_file()
            && e.file_name()
                .as_bytes()
                .starts_with(WHITEOUT_PREFIX.as_bytes())
        {
            markers.push(e.path().to_owned());
        }
    }
    let needs_root = |path: &Path, what: &str, e: io::Error| -> Error {
        if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) {
            Error::NeedsRoot {
                operation: "converting a layer to overlayfs form".to_owned(),
                reason: format!("{what} {}: {e}", path.display()),
            }
        } else {
            apply_err(path, what, e)
        }
    };
    for m in markers {
        let Some(dir) = m.parent() else { continue };
        if dir == staged
            && m.file_name()
                .is_some_and(|n| n.as_bytes() == OPAQUE_MARKER.as_bytes())
        {
            // Overlayfs reads no `opaque` attribute on a layer's root: the marker would be
            // ignored there, and the layer would show the base it means to hide.
            return Err(apply_err(
                &m,
                "converting",
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "an opaque root cannot be an overlayfs layer; apply it to its base instead",
                ),
            ));
        }
        let dmd = read_meta(dir).map_err(|e| apply_err(dir, "lstat", e))?;
        let name = m
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_default();
        std::fs::remove_file(&m).map_err(|e| apply_err(&m, "removing marker", e))?;
        if name == OPAQUE_MARKER.as_bytes() {
            xattr::set(dir, OVERLAY_OPAQUE_XATTR, b"y")
                .map_err(|e| needs_root(dir, "setting trusted.overlay.opaque on", e))?;
        } else {
            let victim = dir.join(std::ffi::OsStr::from_bytes(&name[WHITEOUT_PREFIX.len()..]));
            fsutil::mknod(&victim, Kind::CharDev, 0)
                .map_err(|e| needs_root(&victim, "creating a 0/0 character device", e))?;
        }
        fsutil::set_mtime(dir, dmd.mtime_sec, dmd.mtime_nsec)
            .map_err(|e| apply_err(dir, "restoring mtime", e))?;
    }
    Ok(())
}

/// The layer to export from an overlayfs upper/layer directory: a 0/0 character device is
/// a whiteout, `trusted.overlay.opaque=y` an opaque directory; `trusted.overlay.*` xattrs
/// are stripped from the entries.
pub fn layer_source_from_overlay(layer_dir: &Path) -> Result<LayerSource> {
    let mut out = LayerSource::default();
    // Path order: parents before children, the root first.
    let tree = scan_tree(layer_dir).map_err(|e| apply_err(layer_dir, "scanning", e))?;
    for (rel, mut entry) in tree.entries {
        let meta = &mut entry.meta;
        if meta.is_whiteout() {
            out.whiteouts.push(rel);
            continue;
        }
        // Either namespace: layers of a store made by a normal user carry `user.overlay.*`.
        let opaque = [OVERLAY_OPAQUE_XATTR, "user.overlay.opaque"]
            .iter()
            .any(|x| meta.xattrs.get(*x).map(Vec::as_slice) == Some(b"y"));
        if meta.is_dir() && opaque {
            out.opaque_dirs.push(rel);
        }
        meta.xattrs
            .retain(|k, _| !crate::fsops::scan::is_overlay_xattr(k));
        out.entries.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_while_applying_is_not_blamed_on_the_archive() {
        let full = io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        assert!(matches!(
            apply_err(Path::new("/x"), "copying", full),
            Error::NoSpace { .. }
        ));
        let quota = Error::Io(io::Error::from_raw_os_error(
            rustix::io::Errno::DQUOT.raw_os_error(),
        ));
        assert!(matches!(
            apply_err(Path::new("/x"), "copying", quota),
            Error::NoSpace { .. }
        ));
        let other = io::Error::from_raw_os_error(rustix::io::Errno::ACCESS.raw_os_error());
        assert!(matches!(
            apply_err(Path::new("/x"), "copying", other),
            Error::Bundle { .. }
        ));
    }
}
