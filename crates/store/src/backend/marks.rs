//! The marks of a working layer: the identity of every upper entry at the last commit, so
//! that the next commit takes only what changed since.
//!
//! One file (over 600 lines): the on-disk format (base and log), the per-thread cache of
//! what was loaded and the comparison of a scan with the marks share the [`Mark`] type and
//! its invariants; splitting them would spread one format over several files.
//!
//! On disk, in an environment's work directory:
//! * `captured.json` — the base: `{"token": T, "marks": {path: mark}}`. Written whole when a
//!   commit rebuilt the marks (a handoff, a compaction, a flatten), or when the log below
//!   has grown past the base's size.
//! * `captured.log` — one JSON line per commit since the base:
//!   `{"token": T, "set": {path: mark}, "del": [path]}`. A line applies only to the base
//!   with its token (a new base gets a new random token, so a log left over from an older
//!   base is ignored); a line that is not whole JSON (torn by a crash) is skipped.
//!
//! Both are staged by the commit (`captured.pending.json` or `captured.pending-log.json`)
//! and adopted once the commit is durable, so marks never get ahead of the nodes: losing
//! the adoption (a crash in between) leaves the previous commit's marks, and the next
//! commit takes those changes again.
//!
//! A process keeps the marks it read or wrote last in memory ([`load`]), checked against
//! the files' identities (device, inode, ctime, and the log's length) before every use:
//! a box's supervisor then reads neither file again while it alone commits the box, and
//! a commit appends a few lines instead of rewriting a mark per entry the box ever wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentbox_core::atomic::write_json_compact_unsynced;
use serde::{Deserialize, Serialize};

use crate::backend::WorkDirs;
use crate::fsops::io_at;
use crate::{Error, Result};

/// Identity of an upper entry at capture time; any change of content or metadata changes
/// the ctime, a replacement changes the inode or, when the filesystem hands a freed inode
/// number out again, the birth time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    pub ino: u64,
    pub ctime: (i64, i64),
    /// `None` where the filesystem keeps no birth time, and in marks written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub btime: Option<(i64, u32)>,
    pub whiteout: bool,
    pub dir: bool,
}

impl Mark {
    /// Whether the entry is unchanged. A whiteout is a whiteout: overlayfs may share one
    /// inode among all of them and its ctime moves whenever any whiteout comes or goes (or
    /// a mount cleans the work directory), which changes nothing in the tree. A birth time
    /// only one side knows is no difference (marks of an older version lack it).
    pub fn same(&self, other: &Mark) -> bool {
        if self.whiteout && other.whiteout {
            return true;
        }
        self.ctime == other.ctime && self.whiteout == other.whiteout && !self.replaced_by(other)
    }

    /// Whether `now` is known to be another entry than the one this mark recorded: another
    /// kind, another inode, or the same inode number born at another time.
    pub fn replaced_by(&self, now: &Mark) -> bool {
        self.dir != now.dir
            || self.ino != now.ino
            || matches!((self.btime, now.btime), (Some(a), Some(b)) if a != b)
    }

    /// Whether `now` is provably the directory this mark recorded, not one made again
    /// since (a directory's ctime moves with every entry made or removed in it, so only
    /// the inode and the birth time say which one it is). Without a birth time on either
    /// side a reused inode number cannot be told apart: the answer is no.
    pub fn same_dir(&self, now: &Mark) -> bool {
        self.dir
            && now.dir
            && self.ino == now.ino
            && self.btime.is_some()
            && self.btime == now.btime
    }

    pub fn of(st: &rustix::fs::Statx) -> Mark {
        use rustix::fs::{FileType, StatxFlags};
        let kind = FileType::from_raw_mode(u32::from(st.stx_mode));
        let born = StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME);
        Mark {
            ino: st.stx_ino,
            ctime: (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
            btime: born.then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec)),
            whiteout: kind == FileType::CharacterDevice
                && st.stx_rdev_major == 0
                && st.stx_rdev_minor == 0,
            dir: kind == FileType::Directory,
        }
    }
}

/// The marks of every upper entry, by relative path. Paths that are not UTF-8 are not
/// recorded, so they are simply captured again by every commit (correct, only slower).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct Captured {
    /// Which base this is (see the module doc); 0 in files written before the log.
    #[serde(default)]
    pub token: u64,
    pub marks: BTreeMap<String, Mark>,
}

/// What a commit changes in the marks: a whole new set, or changes to the current one.
#[derive(Debug)]
pub(super) enum NewMarks {
    Whole(Captured),
    Changes(Changes),
}

/// One line of `captured.log`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Changes {
    pub token: u64,
    pub set: BTreeMap<String, Mark>,
    pub del: Vec<String>,
}

impl Changes {
    fn apply(&self, to: &mut BTreeMap<String, Mark>) {
        for k in &self.del {
            to.remove(k);
        }
        for (k, m) in &self.set {
            to.insert(k.clone(), *m);
        }
    }
}

/// Which marks a change check compared against: the base's token and how many log lines
/// were applied over it. Equal versions are equal marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MarksVersion {
    token: u64,
    records: u64,
}

/// Which file a path names, and its version: device, inode, ctime.
pub(super) type FileId = (u64, u64, i64, i64);

pub(super) fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

fn log_id(path: &Path) -> Option<(FileId, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| ((m.dev(), m.ino(), m.ctime(), m.ctime_nsec()), m.len()))
}

/// The marks of one work directory as read, with what they were read from.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub captured: Captured,
    records: u64,
    base_id: Option<FileId>,
    log: Option<(FileId, u64)>,
}

impl Loaded {
    pub fn version(&self) -> MarksVersion {
        MarksVersion {
            token: self.captured.token,
            records: self.records,
        }
    }
}

/// Marks kept by this process, by work directory (a few: a supervisor commits one box).
static KEPT: Mutex<Vec<(PathBuf, Arc<Loaded>)>> = Mutex::new(Vec::new());
const KEPT_MAX: usize = 4;

fn kept() -> std::sync::MutexGuard<'static, Vec<(PathBuf, Arc<Loaded>)>> {
    // A panic while holding it leaves a list that is still consistent.
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

fn keep(work: &Path, loaded: Arc<Loaded>) {
    let mut k = kept();
    k.retain(|(w, _)| w != work);
    if k.len() >= KEPT_MAX {
        k.remove(0);
    }
    k.push((work.to_owned(), loaded));
}

pub(super) fn base_path(dirs: &WorkDirs) -> PathBuf {
    dirs.work.join("captured.json")
}
fn log_path(dirs: &WorkDirs) -> PathBuf {
    dirs.work.join("captured.log")
}
fn pending_base(dirs: &WorkDirs) -> PathBuf {
    dirs.work.join("captured.pending.json")
}
fn pending_log(dirs: &WorkDirs) -> PathBuf {
    dirs.work.join("captured.pending-log.json")
}

/// The marks of `dirs`'s last commit: the kept ones if both files are as they were when
/// they were read or written here, else read again.
pub(super) fn load(dirs: &WorkDirs) -> Result<Arc<Loaded>> {
    let (base, log) = (base_path(dirs), log_path(dirs));
    let (base_id, log_now) = (file_id(&base), log_id(&log));
    if let Some((_, l)) = kept().iter().find(|(w, _)| *w == dirs.work) {
        if l.base_id == base_id && l.log == log_now {
            return Ok(l.clone());
        }
    }
    let mut captured: Captured = agentbox_core::atomic::read_json_opt(&base)?.unwrap_or_default();
    let mut records = 0;
    if captured.token != 0 && log_now.is_some() {
        match fs_err::File::open(&log) {
            Ok(f) => {
                let mut reader = std::io::BufReader::new(f);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    let n = reader.read_until(b'\n', &mut line)?;
                    if n == 0 || line.last() != Some(&b'\n') {
                        break;
                    }
                    // A line torn by a crash (terminated by the next append) is skipped:
                    // losing one commit's marks only makes the next commit take them again.
                    match serde_json::from_slice::<Changes>(&line) {
                        Ok(changes) if changes.token == captured.token => {
                            changes.apply(&mut captured.marks);
                            records += 1;
                        }
                        _ => {}
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    let loaded = Arc::new(Loaded {
        captured,
        records,
        base_id,
        log: log_now,
    });
    keep(&dirs.work, loaded.clone());
    Ok(loaded)
}

/// A base token: random, never 0 (0 is "written before the log").
fn new_token() -> u64 {
    let mut b = [0u8; 8];
    // Any value will do when randomness is unavailable: the token only has to differ from
    // the previous base's, and the clock does.
    if getrandom_fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        b = t.to_le_bytes();
    }
    u64::from_le_bytes(b).max(1)
}

fn getrandom_fill(b: &mut [u8]) -> std::io::Result<()> {
    fs_err::File::open("/dev/urandom")?.read_exact(b)
}

/// Record `new` as the marks to adopt once the commit is durable (see [`adopt`]). A log
/// that would grow past the base's size is folded into a new base instead.
pub(super) fn stage(dirs: &WorkDirs, new: NewMarks) -> Result<()> {
    // Made durable by the store's sync with the rest of the commit; losing them only
    // means the next commit takes these changes again. Only one of the two may be
    // pending: a stale one of an abandoned commit must not be adopted with this one.
    let new = match new {
        NewMarks::Changes(mut changes) => {
            let prev = load(dirs)?;
            let log_len = prev.log.map_or(0, |(_, len)| len);
            let base_len = std::fs::symlink_metadata(base_path(dirs)).map_or(0, |m| m.len());
            if prev.captured.token == 0 || log_len > base_len.max(64 * 1024) {
                let mut whole = prev.captured.clone();
                changes.apply(&mut whole.marks);
                NewMarks::Whole(whole)
            } else {
                changes.token = prev.captured.token;
                NewMarks::Changes(changes)
            }
        }
        whole => whole,
    };
    match new {
        NewMarks::Whole(mut whole) => {
            remove_if_there(&pending_log(dirs))?;
            whole.token = new_token();
            write_json_compact_unsynced(&pending_base(dirs), &whole)?;
        }
        NewMarks::Changes(changes) => {
            remove_if_there(&pending_base(dirs))?;
            write_json_compact_unsynced(&pending_log(dirs), &changes)?;
        }
    }
    Ok(())
}

/// The commit is durable: its staged marks become the reference for the next one.
pub(super) fn adopt(dirs: &WorkDirs) -> Result<()> {
    let (base, log) = (pending_base(dirs), pending_log(dirs));
    if base.exists() {
        fs_err::rename(&base, base_path(dirs))?;
        // Its lines are of the old base (another token): they would be ignored anyway.
        remove_if_there(&log_path(dirs))?;
        remove_if_there(&log)?;
        return Ok(());
    }
    let line = match fs_err::read(&log) {
        Ok(line) => line,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let changes: Changes = serde_json::from_slice(&line).map_err(|e| Error::Corrupt {
        path: log.clone(),
        message: format!("staged marks are not valid JSON: {e}"),
    })?;
    let before = load(dirs)?;
    let mut f = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(dirs))?;
    let len = f.seek(std::io::SeekFrom::End(0))?;
    let mut written = line.len() as u64;
    // After a line torn by a crash, start on a line of its own.
    let mut last = [0u8];
    if len > 0 && f.file().read_at(&mut last, len - 1).is_ok_and(|n| n == 1) && last[0] != b'\n' {
        f.write_all(b"\n")?;
        written += 1;
    }
    f.write_all(&line)?;
    drop(f);
    remove_if_there(&log)?;
    // What this process just wrote is what it keeps, if nobody else wrote meanwhile.
    kept().retain(|(w, _)| *w != dirs.work);
    let log_now = log_id(&log_path(dirs));
    let unchanged_before = before.log.map_or(0, |(_, l)| l) == len;
    if before.captured.token == changes.token
        && unchanged_before
        && log_now.is_some_and(|(_, l)| l == len + written)
    {
        let mut now = Arc::unwrap_or_clone(before);
        changes.apply(&mut now.captured.marks);
        now.records += 1;
        now.log = log_now;
        keep(&dirs.work, Arc::new(now));
    }
    Ok(())
}

/// Forget the marks (the upper directory they describe is gone).
pub(super) fn discard(dirs: &WorkDirs) -> Result<()> {
    for p in [
        base_path(dirs),
        log_path(dirs),
        pending_base(dirs),
        pending_log(dirs),
    ] {
        remove_if_there(&p)?;
    }
    kept().retain(|(w, _)| *w != dirs.work);
    Ok(())
}

fn remove_if_there(p: &Path) -> Result<()> {
    match fs_err::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Paths of an upper directory that may have changed since the marks of version `since`:
/// everything else is known to be as those marks say (see [`partial_scan`]).
#[derive(Debug, Clone)]
pub struct ChangeHint {
    pub since: MarksVersion,
    pub paths: Vec<PathBuf>,
}

/// The upper entries a change check looked at, with their marks now.
#[derive(Debug)]
pub(super) enum Scan {
    /// Every entry of the upper directory.
    Full(BTreeMap<PathBuf, Mark>),
    /// Only the entries of a [`ChangeHint`] (with what [`partial_scan`] adds to it): the
    /// others are as the marks say. `gone` are marked paths that no longer exist.
    Partial {
        present: BTreeMap<PathBuf, Mark>,
        gone: BTreeSet<String>,
    },
}

/// The mark of every entry below `root` (the root itself as the empty path), from one
/// `lstat` each: no xattrs, no file content.
pub(super) fn scan_marks(root: &Path) -> Result<BTreeMap<PathBuf, Mark>> {
    Ok(crate::fsops::walk::lstat_tree(root)?
        .into_iter()
        .map(|(rel, md)| (rel, Mark::of(&md)))
        .collect())
}

/// The marked paths a whole scan did not find (by hash: comparing paths component by
/// component is most of the cost of a check of a large layer).
pub(super) fn not_found<'a>(
    prev: &'a BTreeMap<String, Mark>,
    found: &BTreeMap<PathBuf, Mark>,
) -> Vec<(&'a String, &'a Mark)> {
    let found: std::collections::HashSet<&str> = found.keys().filter_map(|p| p.to_str()).collect();
    prev.iter()
        .filter(|(k, _)| !found.contains(k.as_str()))
        .collect()
}

/// The keys of `marks` strictly below directory `dir`.
fn below<'a>(
    marks: &'a BTreeMap<String, Mark>,
    dir: &str,
) -> impl Iterator<Item = (&'a String, &'a Mark)> + 'a {
    let start = format!("{dir}/");
    // '0' is the byte after '/': every key below `dir` sorts between the two.
    let end = format!("{dir}0");
    marks.range(start..end)
}

/// Look at the hinted paths of `upper` (and what they imply) against `prev`: each path
/// and its ancestors (a new or removed name changes its directory's ctime), every entry
/// below a directory that is new or replaced since `prev` (its contents are all new
/// names), and the other names of a changed file with more than one link (a link count
/// changes every name's ctime). Names are resolved below `upper` without following any
/// symlink: the box may have replaced a directory of a hinted path by one.
pub(super) fn partial_scan(
    upper: &Path,
    prev: &BTreeMap<String, Mark>,
    hinted: &[PathBuf],
) -> Result<Scan> {
    let mut todo: BTreeSet<PathBuf> = BTreeSet::new();
    todo.insert(PathBuf::new());
    for p in hinted {
        if !is_relative_normal(p) {
            continue;
        }
        for a in p.ancestors() {
            if !todo.insert(a.to_owned()) {
                break;
            }
        }
    }
    let root = rustix::fs::open(
        upper,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io_at("open", upper, e.into()))?;
    let mut present: BTreeMap<PathBuf, Mark> = BTreeMap::new();
    let mut gone: BTreeSet<String> = BTreeSet::new();
    let mut linked: Vec<u64> = Vec::new();
    let mark_gone = |gone: &mut BTreeSet<String>, rel: &Path| {
        if let Some(k) = rel.to_str() {
            if prev.contains_key(k) {
                gone.insert(k.to_owned());
            }
            gone.extend(below(prev, k).map(|(k, _)| k.clone()));
        }
    };
    // The last directory walked whole (new or replaced): the hinted paths below it were
    // all seen by that walk. `todo` is ordered by components, so they follow it at once;
    // looking each up again, and walking each new directory below it again, made a
    // reinstalled tree (`rm -rf v && python3 -m venv v && pip install …`) cost its depth
    // times its size.
    let mut walked_whole: Option<PathBuf> = None;
    for rel in &todo {
        if walked_whole.as_ref().is_some_and(|w| rel.starts_with(w)) {
            continue;
        }
        // Below a path that is gone or not a directory: gone too (and never looked up,
        // which would resolve through what replaced the directory).
        if let Some(parent) = rel.parent().filter(|_| !rel.as_os_str().is_empty()) {
            if !present.get(parent).is_some_and(|m| m.dir) {
                mark_gone(&mut gone, rel);
                continue;
            }
        }
        let Some((mark, nlink)) = stat_beneath(&root, upper, rel)? else {
            mark_gone(&mut gone, rel);
            continue;
        };
        let before = rel.to_str().and_then(|k| prev.get(k));
        if let Some(k) = rel.to_str() {
            if !mark.dir && before.is_some_and(|b| b.dir) {
                gone.extend(below(prev, k).map(|(k, _)| k.clone()));
            }
        }
        present.insert(rel.clone(), mark);
        if mark.dir && !rel.as_os_str().is_empty() && !before.is_some_and(|b| b.same_dir(&mark)) {
            // A new or replaced directory (or one not provably the same): every entry
            // below it is a new name.
            let walked: Vec<(PathBuf, Mark, u64)> =
                crate::fsops::walk::lstat_tree_beneath(upper, rel)?
                    .into_iter()
                    .map(|(sub, md)| {
                        let nlink = u64::from(md.stx_nlink);
                        (sub, Mark::of(&md), nlink)
                    })
                    .collect();
            if let Some(k) = rel.to_str() {
                let names: BTreeSet<&Path> = walked.iter().map(|(p, _, _)| p.as_path()).collect();
                for (old, _) in below(prev, k) {
                    let sub = Path::new(old).strip_prefix(rel).unwrap_or(Path::new(old));
                    if !names.contains(sub) {
                        gone.insert(old.clone());
                    }
                }
            }
            for (sub, m, nlink) in walked {
                if sub.as_os_str().is_empty() {
                    continue;
                }
                let name = rel.join(sub);
                // New names all: one with other links may name a file the marks know.
                if !m.dir && !m.whiteout && nlink > 1 {
                    linked.push(m.ino);
                }
                present.insert(name, m);
            }
            walked_whole = Some(rel.clone());
        }
        if !mark.dir && !mark.whiteout && nlink > 1 && !before.is_some_and(|b| b.same(&mark)) {
            linked.push(mark.ino);
        }
    }
    if !linked.is_empty() {
        // The other names of those inodes, as the marks know them.
        let others: Vec<PathBuf> = prev
            .iter()
            .filter(|(k, m)| linked.contains(&m.ino) && !present.contains_key(Path::new(k)))
            .map(|(k, _)| PathBuf::from(k))
            .collect();
        for rel in others {
            let parent_is_dir = rel
                .parent()
                .is_some_and(|p| present.get(p).is_some_and(|m| m.dir) || prev_dir(prev, p));
            match parent_is_dir
                .then(|| stat_beneath(&root, upper, &rel))
                .transpose()?
            {
                Some(Some((mark, _))) => {
                    // Its directories too: a commit writes a layer entry with its parents,
                    // and takes them from what was looked at.
                    for a in rel.ancestors().skip(1) {
                        if present.contains_key(a) {
                            break;
                        }
                        if let Some((m, _)) = stat_beneath(&root, upper, a)? {
                            present.insert(a.to_owned(), m);
                        }
                    }
                    present.insert(rel, mark);
                }
                _ => {
                    if let Some(k) = rel.to_str() {
                        gone.insert(k.to_owned());
                    }
                }
            }
        }
    }
    // What is present is not gone (a name removed and made again).
    gone.retain(|k| !present.contains_key(Path::new(k)));
    Ok(Scan::Partial { present, gone })
}

fn prev_dir(prev: &BTreeMap<String, Mark>, p: &Path) -> bool {
    p.as_os_str().is_empty() || p.to_str().and_then(|k| prev.get(k)).is_some_and(|m| m.dir)
}

/// A relative path of plain names only (a hint is the box's input: no `..`, no root).
fn is_relative_normal(p: &Path) -> bool {
    !p.as_os_str().is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// `lstat` of `rel` below the directory `root` (opened at `upper`), never following a
/// symlink on the way: its mark and link count, or `None` if it does not exist or one of
/// its directories is not a directory any more (or is a symlink).
fn stat_beneath(
    root: &rustix::fd::OwnedFd,
    upper: &Path,
    rel: &Path,
) -> Result<Option<(Mark, u64)>> {
    use rustix::fs::{AtFlags, OFlags, ResolveFlags};
    let statx = |fd: &rustix::fd::OwnedFd| {
        rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, crate::fsops::walk::WALK_STATX)
    };
    let stat = if rel.as_os_str().is_empty() {
        statx(root)
    } else {
        // O_PATH with O_NOFOLLOW opens the entry itself, whatever it is (a symlink too).
        match rustix::fs::openat2(
            root,
            rel,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => statx(&fd),
            Err(e)
                if e == rustix::io::Errno::NOENT
                    || e == rustix::io::Errno::NOTDIR
                    || e == rustix::io::Errno::LOOP
                    || e == rustix::io::Errno::XDEV =>
            {
                return Ok(None)
            }
            Err(e) => Err(e),
        }
    };
    let st = stat.map_err(|e| io_at("lstat", &upper.join(rel), e.into()))?;
    let mark = Mark::of(&st);
    Ok(Some((mark, u64::from(st.stx_nlink))))
}
