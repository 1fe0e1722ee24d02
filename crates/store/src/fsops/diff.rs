//! Differences between trees: a user-facing change list ([`diff_trees`]) and an exhaustive
//! fidelity check ([`compare_exact`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::SeekFrom;
use rustix::io::Errno;
use serde::Serialize;

use super::{errno_at, io_at, scan::scan_tree, Entry, Kind, Meta, Tree};
use crate::Result;

/// How an entry differs between two trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Only in the new tree.
    Added,
    /// Only in the old tree.
    Removed,
    /// Different type, content, size, symlink target or device number.
    Modified,
    /// Same content, different mode (permission bits incl. setuid/setgid/sticky), owner or
    /// xattrs.
    MetaChanged,
}

/// One difference between two trees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Path relative to the tree roots.
    pub path: PathBuf,
    pub kind: ChangeKind,
    /// Size in the old tree (non-directories present there).
    pub old_size: Option<u64>,
    /// Size in the new tree (non-directories present there).
    pub new_size: Option<u64>,
    /// What changed, e.g. `mode 0644 -> 0755; owner 0:0 -> 1000:1000`.
    pub detail: Option<String>,
}

fn size_of(meta: &Meta) -> Option<u64> {
    (meta.kind != Kind::Dir).then_some(meta.size)
}

/// The changes from `a` (old) to `b` (new), sorted by path. The root is never reported as
/// added or removed. Mtime-only changes are not reported; directory mtimes never are (they
/// follow from changes of their children).
pub fn diff_trees(a: &Tree, b: &Tree) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    let paths: BTreeSet<&PathBuf> = a.entries.keys().chain(b.entries.keys()).collect();
    for path in paths {
        let is_root = path.as_os_str().is_empty();
        match (a.entries.get(path), b.entries.get(path)) {
            (Some(old), None) => {
                if !is_root {
                    out.push(Change {
                        path: path.clone(),
                        kind: ChangeKind::Removed,
                        old_size: size_of(&old.meta),
                        new_size: None,
                        detail: None,
                    });
                }
            }
            (None, Some(new)) => {
                if !is_root {
                    out.push(Change {
                        path: path.clone(),
                        kind: ChangeKind::Added,
                        old_size: None,
                        new_size: size_of(&new.meta),
                        detail: None,
                    });
                }
            }
            (Some(old), Some(new)) => {
                let content = content_difference(old, new)?;
                let meta = meta_differences(&old.meta, &new.meta);
                let kind = if content.is_some() {
                    ChangeKind::Modified
                } else if !meta.is_empty() {
                    ChangeKind::MetaChanged
                } else {
                    continue;
                };
                let details: Vec<String> = content.into_iter().chain(meta).collect();
                out.push(Change {
                    path: path.clone(),
                    kind,
                    old_size: size_of(&old.meta),
                    new_size: size_of(&new.meta),
                    detail: Some(details.join("; ")),
                });
            }
            (None, None) => {}
        }
    }
    Ok(out)
}

/// Why the content of two entries differs, or `None` when it is the same.
fn content_difference(old: &Entry, new: &Entry) -> Result<Option<String>> {
    let (a, b) = (&old.meta, &new.meta);
    if a.kind != b.kind {
        return Ok(Some(format!("type {} -> {}", a.kind.name(), b.kind.name())));
    }
    Ok(match a.kind {
        Kind::Dir | Kind::Fifo | Kind::Socket => None,
        Kind::Symlink => (a.target != b.target).then(|| {
            format!(
                "symlink target {} -> {}",
                show_target(&a.target),
                show_target(&b.target)
            )
        }),
        Kind::CharDev | Kind::BlockDev => (a.rdev != b.rdev)
            .then(|| format!("device {} -> {}", show_dev(a.rdev), show_dev(b.rdev))),
        Kind::File => {
            if a.size != b.size {
                Some(format!("size {} -> {}", a.size, b.size))
            } else if same_inode_version(a, b) || same_bytes(&old.src, &new.src)? {
                None
            } else {
                Some("content".to_string())
            }
        }
    })
}

/// Same inode, untouched since: snapshots and overlay layers keep inode numbers, so this
/// avoids reading files that cannot differ.
fn same_inode_version(a: &Meta, b: &Meta) -> bool {
    a.dev == b.dev
        && a.ino == b.ino
        && a.mtime_sec == b.mtime_sec
        && a.mtime_nsec == b.mtime_nsec
        && a.ctime_sec == b.ctime_sec
        && a.ctime_nsec == b.ctime_nsec
        && !a.born_apart(b)
}

fn show_target(t: &Option<PathBuf>) -> String {
    t.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn show_dev(rdev: u64) -> String {
    format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev))
}

/// Mode, owner and xattr differences (never mtimes, never the type).
fn meta_differences(a: &Meta, b: &Meta) -> Vec<String> {
    let mut out = Vec::new();
    // The mode of a symlink is meaningless (always 0777 on Linux).
    if a.perm != b.perm && !(a.kind == Kind::Symlink && b.kind == Kind::Symlink) {
        out.push(format!("mode {:04o} -> {:04o}", a.perm, b.perm));
    }
    if (a.uid, a.gid) != (b.uid, b.gid) {
        out.push(format!("owner {}:{} -> {}:{}", a.uid, a.gid, b.uid, b.gid));
    }
    let changed = xattr_changes(&a.xattrs, &b.xattrs);
    if !changed.is_empty() {
        out.push(format!("xattrs {}", changed.join(", ")));
    }
    out
}

/// `+name`, `-name`, `~name` for added, removed and changed xattrs.
fn xattr_changes(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter_map(|n| match (a.get(n), b.get(n)) {
            (Some(_), None) => Some(format!("-{n}")),
            (None, Some(_)) => Some(format!("+{n}")),
            (Some(x), Some(y)) if x != y => Some(format!("~{n}")),
            _ => None,
        })
        .collect()
}

/// Byte-compare two files by streaming both. Either may be in a running box's working
/// tree: neither is opened through a symlink at its last component nor waited on as a FIFO
/// (a file the box swapped since it was listed is an error, "changed while copied").
pub(crate) fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let mut fa = super::copy::open_regular(a, None)?;
    let mut fb = super::copy::open_regular(b, None)?;
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let na = read_full(&mut fa, &mut ba).map_err(|e| io_at("read", a, e))?;
        let nb = read_full(&mut fb, &mut bb).map_err(|e| io_at("read", b, e))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

/// Read until `buf` is full or end of file.
fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Bytes of `path` (of length `size`) that lie in holes, measured with SEEK_DATA/SEEK_HOLE.
fn hole_bytes(path: &Path, size: u64) -> Result<u64> {
    let f = super::copy::open_regular(path, None)?;
    let mut data = 0u64;
    let mut pos = 0u64;
    while pos < size {
        let start = match rustix::fs::seek(&f, SeekFrom::Data(pos)) {
            Ok(off) => off,
            Err(Errno::NXIO) => break,
            Err(Errno::INVAL | Errno::OPNOTSUPP) => return Ok(0),
            Err(e) => return Err(errno_at("seek data in", path, e)),
        };
        let end = match rustix::fs::seek(&f, SeekFrom::Hole(start)) {
            Ok(off) => off.min(size),
            Err(Errno::NXIO) => size,
            Err(e) => return Err(errno_at("seek hole in", path, e)),
        };
        data += end.saturating_sub(start);
        if end <= pos {
            break;
        }
        pos = end;
    }
    Ok(size.saturating_sub(data))
}

/// For every non-directory that shares its inode with other entries of the tree, the sorted
/// set of paths sharing it.
fn link_groups(tree: &Tree) -> HashMap<&PathBuf, Vec<&PathBuf>> {
    let mut by_inode: HashMap<(u64, u64), Vec<&PathBuf>> = HashMap::new();
    for (rel, e) in &tree.entries {
        if e.meta.kind != Kind::Dir && e.meta.nlink > 1 {
            by_inode
                .entry((e.meta.dev, e.meta.ino))
                .or_default()
                .push(rel);
        }
    }
    let mut out = HashMap::new();
    for mut group in by_inode.into_values() {
        if group.len() < 2 {
            continue;
        }
        group.sort();
        for p in &group {
            out.insert(*p, group.clone());
        }
    }
    out
}

/// Every difference between the trees at `a` and `b`: presence, type, content, permission
/// bits, uid, gid, xattrs, symlink target, device number, mtime (files, symlinks and
/// directories, nanoseconds), sparseness (a file with holes in `a` whose copy in `b` has
/// fewer hole bytes) and hardlink structure. Empty means identical.
pub fn compare_exact(a: &Path, b: &Path) -> Result<Vec<String>> {
    let ta = scan_tree(a)?;
    let tb = scan_tree(b)?;
    let mut out = Vec::new();
    let paths: BTreeSet<&PathBuf> = ta.entries.keys().chain(tb.entries.keys()).collect();
    for path in paths {
        let shown = if path.as_os_str().is_empty() {
            ".".to_string()
        } else {
            path.display().to_string()
        };
        let (ea, eb) = match (ta.entries.get(path), tb.entries.get(path)) {
            (Some(x), Some(y)) => (x, y),
            (Some(_), None) => {
                out.push(format!("{shown}: only in {}", a.display()));
                continue;
            }
            (None, Some(_)) => {
                out.push(format!("{shown}: only in {}", b.display()));
                continue;
            }
            (None, None) => continue,
        };
        let (ma, mb) = (&ea.meta, &eb.meta);
        if ma.kind != mb.kind {
            out.push(format!(
                "{shown}: type {} vs {}",
                ma.kind.name(),
                mb.kind.name()
            ));
            continue;
        }
        if ma.kind != Kind::Symlink && ma.perm != mb.perm {
            out.push(format!("{shown}: mode {:04o} vs {:04o}", ma.perm, mb.perm));
        }
        if ma.uid != mb.uid {
            out.push(format!("{shown}: uid {} vs {}", ma.uid, mb.uid));
        }
        if ma.gid != mb.gid {
            out.push(format!("{shown}: gid {} vs {}", ma.gid, mb.gid));
        }
        let xc = xattr_changes(&ma.xattrs, &mb.xattrs);
        if !xc.is_empty() {
            out.push(format!("{shown}: xattrs differ: {}", xc.join(", ")));
        }
        if (ma.mtime_sec, ma.mtime_nsec) != (mb.mtime_sec, mb.mtime_nsec) {
            out.push(format!(
                "{shown}: mtime {}.{:09} vs {}.{:09}",
                ma.mtime_sec, ma.mtime_nsec, mb.mtime_sec, mb.mtime_nsec
            ));
        }
        match ma.kind {
            Kind::Symlink if ma.target != mb.target => out.push(format!(
                "{shown}: symlink target {} vs {}",
                show_target(&ma.target),
                show_target(&mb.target)
            )),
            Kind::CharDev | Kind::BlockDev if ma.rdev != mb.rdev => out.push(format!(
                "{shown}: device {} vs {}",
                show_dev(ma.rdev),
                show_dev(mb.rdev)
            )),
            Kind::File => {
                if ma.size != mb.size {
                    out.push(format!("{shown}: size {} vs {}", ma.size, mb.size));
                } else if !same_bytes(&ea.src, &eb.src)? {
                    out.push(format!("{shown}: content differs"));
                } else {
                    let ha = hole_bytes(&ea.src, ma.size)?;
                    if ha > 0 {
                        let hb = hole_bytes(&eb.src, mb.size)?;
                        if hb < ha {
                            out.push(format!(
                                "{shown}: sparse file lost holes: {ha} hole bytes vs {hb}"
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let (ga, gb) = (link_groups(&ta), link_groups(&tb));
    let linked: BTreeSet<&PathBuf> = ga.keys().chain(gb.keys()).copied().collect();
    for path in linked {
        let (xa, xb) = (ga.get(path), gb.get(path));
        if xa != xb {
            let show = |g: Option<&Vec<&PathBuf>>| -> String {
                g.map(|g| {
                    g.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| "not linked".into())
            };
            out.push(format!(
                "{}: hardlinks [{}] vs [{}]",
                path.display(),
                show(xa),
                show(xb)
            ));
        }
    }
    Ok(out)
}
