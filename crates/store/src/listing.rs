//! Layer listings: `layers/<id>.paths`, the paths a layer's tree may hold beyond those of
//! another layer, so that [`crate::Store::derive`] finds what a cleanup matches by matching
//! names in memory instead of walking a tree of tens of thousands of entries.
//!
//! # Invariant
//!
//! The listing of layer `L` is a pair `(base, paths)`. The *tree of* a layer is the tree a
//! node on it has: on `layers`, the merged tree of the chain ending at it; on `btrfs`, its
//! subvolume. Then:
//!
//! > every entry of `L`'s tree whose path is not in `paths` is, at that path, the same file
//! > as in `base`'s tree (same type, content and metadata; on `btrfs` the snapshot's copy of
//! > it); with no base, `paths` holds every path of `L`'s tree.
//!
//! Following bases down from a layer therefore reaches every path of its tree, and a path
//! first found listed in layer `X` of that lineage (or not listed down to `X`'s base) is,
//! in the top layer's tree, the very file `X`'s tree has there. That is what lets a derive
//! stop at a layer already cleaned (see `LayerRecord::cleaned`).
//!
//! Listing more is harmless (a listed path `L`'s tree lacks costs one lookup); listing less
//! would let a derive miss a file, so a listing is only ever written from the very entries
//! that were put into the layer:
//!
//! * `layers`: a layer's own entries (its directory, whiteouts included), base = its
//!   parent; a complete layer lists its whole tree and has no base;
//! * `btrfs`: a box's commit is a snapshot of the previous layer with the captured changes
//!   applied, so it lists those changes with the previous layer as base; a derived layer
//!   lists its edits over its source's layer; other layers have no listing.
//!
//! A layer without a valid listing (an older store, an import, a snapshot of a mounted
//! environment on `btrfs`) is walked when a derive needs it — on `layers` its directory
//! holds exactly its own entries, on `btrfs` its whole tree — and the result is kept as its
//! listing, so each layer is walked at most once. Layers are immutable, so a listing never
//! goes stale; it is removed with its layer, and by `reconcile` when its layer has no record.
//!
//! # Format (version 1)
//!
//! ```text
//! agentbox-layer-paths 1\n
//! base <layer id>\n          (or `base -\n`: no base)
//! count <n>\n
//! <path>\0 … n times         (relative to the layer's root, raw bytes, never the root)
//! \n<blake3 hex of every byte before this line>\n
//! ```
//!
//! The checksum makes a listing torn by a crash (it is written without an fsync, then
//! renamed into place) read as missing rather than short: the layer is walked again.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::store::io_at;
use crate::{Error, Result};

const MAGIC: &str = "agentbox-layer-paths 1";
const SUFFIX: &str = ".paths";

/// The listing file of layer `id` in the store's `layers/` directory.
pub(crate) fn path(layers: &Path, id: &str) -> PathBuf {
    layers.join(format!("{id}{SUFFIX}"))
}

/// The layer id a file name of `layers/` is the listing of.
pub(crate) fn id_of(file_name: &str) -> Option<&str> {
    file_name.strip_suffix(SUFFIX)
}

/// A layer's listing as read back: `base` and the listed paths, NUL-separated in
/// `buf[start..]` (a listing read from its file keeps the file's bytes: no copy).
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub base: Option<String>,
    buf: Vec<u8>,
    start: usize,
}

impl PartialEq for Listing {
    fn eq(&self, other: &Listing) -> bool {
        self.base == other.base && self.body() == other.body()
    }
}

impl Listing {
    /// A listing of `paths` (relative; the root, if given, is left out) over `base`.
    pub fn new<'a>(base: Option<String>, paths: impl IntoIterator<Item = &'a Path>) -> Listing {
        let mut buf = Vec::new();
        for p in paths {
            let bytes = p.as_os_str().as_bytes();
            if bytes.is_empty() {
                continue;
            }
            buf.extend_from_slice(bytes);
            buf.push(0);
        }
        Listing {
            base,
            buf,
            start: 0,
        }
    }

    fn body(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The listed paths, as raw relative paths.
    pub fn paths(&self) -> impl Iterator<Item = &[u8]> {
        self.body().split(|&b| b == 0).filter(|p| !p.is_empty())
    }

    /// How many paths are listed.
    pub fn count(&self) -> usize {
        self.body().iter().filter(|&&b| b == 0).count()
    }

    /// Write the listing of layer `id` (replacing any), atomically but without an fsync:
    /// a listing lost or torn by a crash is detected on read and rebuilt by a walk.
    pub fn write(&self, layers: &Path, id: &str) -> Result<()> {
        let mut out = Vec::with_capacity(self.buf.len() + 160);
        out.extend_from_slice(MAGIC.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(format!("base {}\n", self.base.as_deref().unwrap_or("-")).as_bytes());
        out.extend_from_slice(format!("count {}\n", self.count()).as_bytes());
        out.extend_from_slice(self.body());
        let sum = blake3::hash(&out).to_hex();
        out.push(b'\n');
        out.extend_from_slice(sum.as_bytes());
        out.push(b'\n');
        agentbox_core::atomic::write_atomic_unsynced(&path(layers, id), &out)?;
        Ok(())
    }

    /// The listing of layer `id`, or `None` when it has none or the file does not check out
    /// (other version, torn, corrupt).
    pub fn read(layers: &Path, id: &str) -> Result<Option<Listing>> {
        let file = path(layers, id);
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::Io(io_at(&file, e))),
        };
        Ok(parse(bytes))
    }
}

fn parse(mut bytes: Vec<u8>) -> Option<Listing> {
    // Trailer: "\n" + 64 hex digits + "\n".
    let body_len = bytes.len().checked_sub(66)?;
    let (body, trailer) = bytes.split_at(body_len);
    if trailer[0] != b'\n' || trailer[65] != b'\n' {
        return None;
    }
    if blake3::hash(body).to_hex().as_bytes() != &trailer[1..65] {
        return None;
    }
    let mut rest = body;
    let mut line = || -> Option<&[u8]> {
        let end = rest.iter().position(|&b| b == b'\n')?;
        let (l, r) = rest.split_at(end);
        rest = &r[1..];
        Some(l)
    };
    if line()? != MAGIC.as_bytes() {
        return None;
    }
    let base = std::str::from_utf8(line()?.strip_prefix(b"base ")?).ok()?;
    let count: usize = std::str::from_utf8(line()?.strip_prefix(b"count ")?)
        .ok()?
        .parse()
        .ok()?;
    let base = (base != "-").then(|| base.to_owned());
    let start = body_len - rest.len();
    bytes.truncate(body_len);
    let listing = Listing {
        base,
        buf: bytes,
        start,
    };
    (listing.body().last().is_none_or(|&b| b == 0) && listing.count() == count).then_some(listing)
}

/// The listing of `layer`, whose directory is `dir`: its file in `layers`, or else a walk of
/// the directory — on `layers` exactly the layer's own entries (over its parent), on `btrfs`
/// its whole tree (no parent) — kept as its listing for next time. `None` when the layer's
/// data is gone.
pub(crate) fn of_layer(
    layers: &Path,
    dir: &Path,
    layer: &crate::backend::LayerRecord,
) -> Result<Option<Listing>> {
    if let Some(listing) = Listing::read(layers, &layer.id)? {
        return Ok(Some(listing));
    }
    if !dir.is_dir() {
        return Ok(None);
    }
    let paths = walk(dir)?;
    let listing = Listing::new(layer.parent.clone(), paths.iter().map(PathBuf::as_path));
    // Only a cache: when it cannot be kept (a read-only store), the next reader walks again.
    let _ = listing.write(layers, &layer.id);
    Ok(Some(listing))
}

/// Every path below `root` (not the root itself), never following symlinks: one
/// `getdents` per directory and no `lstat` (the entry type comes with the name; only
/// filesystems that do not report it cost an `lstat`). Names are sorted per directory, so
/// parents come before their children.
pub(crate) fn walk(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![children(root, Path::new(""))?.into_iter()];
    while let Some(level) = stack.last_mut() {
        match level.next() {
            None => {
                stack.pop();
            }
            Some((rel, is_dir)) => {
                if is_dir {
                    let below = children(root, &rel)?;
                    stack.push(below.into_iter());
                }
                out.push(rel);
            }
        }
    }
    Ok(out)
}

/// The entries of directory `rel` below `root`, sorted by name, with whether each is a
/// directory.
fn children(root: &Path, rel: &Path) -> Result<Vec<(PathBuf, bool)>> {
    let dir = root.join(rel);
    let mut names = Vec::new();
    for item in std::fs::read_dir(&dir).map_err(|e| Error::Io(io_at(&dir, e)))? {
        let item = item.map_err(|e| Error::Io(io_at(&dir, e)))?;
        let is_dir = item
            .file_type()
            .map_err(|e| Error::Io(io_at(&item.path(), e)))?
            .is_dir();
        names.push((item.file_name(), is_dir));
    }
    names.sort();
    Ok(names
        .into_iter()
        .map(|(name, is_dir)| (rel.join(name), is_dir))
        .collect())
}

/// Remove the listing of layer `id`, if any.
pub(crate) fn remove(layers: &Path, id: &str) -> Result<()> {
    let file = path(layers, id);
    match std::fs::remove_file(&file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io(io_at(&file, e))),
    }
}

/// A listed path as a path.
pub(crate) fn as_path(raw: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_round_trip_and_torn_ones_read_as_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let odd = PathBuf::from(OsStr::from_bytes(b"a/\xff\nname"));
        let paths = [
            Path::new(""),
            Path::new("a"),
            odd.as_path(),
            Path::new("b c"),
        ];
        let listing = Listing::new(Some("base-id".into()), paths);
        listing.write(dir.path(), "x").expect("write");
        let back = Listing::read(dir.path(), "x")
            .expect("read")
            .expect("valid");
        assert_eq!(back, listing);
        let listed: Vec<&[u8]> = back.paths().collect();
        assert_eq!(listed, [b"a".as_slice(), b"a/\xff\nname", b"b c"]);
        Listing::new(None, [])
            .write(dir.path(), "empty")
            .expect("write");
        let empty = Listing::read(dir.path(), "empty")
            .expect("read")
            .expect("valid");
        assert_eq!((empty.base.as_deref(), empty.paths().count()), (None, 0));

        let file = path(dir.path(), "x");
        let bytes = std::fs::read(&file).expect("read");
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&file, &bytes[..cut]).expect("tear");
            assert_eq!(
                Listing::read(dir.path(), "x").expect("read"),
                None,
                "cut {cut}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        std::fs::write(&file, &flipped).expect("corrupt");
        assert_eq!(Listing::read(dir.path(), "x").expect("read"), None);
        assert_eq!(Listing::read(dir.path(), "none").expect("read"), None);
        remove(dir.path(), "x").expect("remove");
        remove(dir.path(), "x").expect("missing is fine");
        assert_eq!(id_of("abc.paths"), Some("abc"));
    }

    #[test]
    fn walks_list_every_path_parents_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for p in ["b/c/d", "a", "b/e"] {
            std::fs::create_dir_all(root.join(p)).expect("mkdir");
        }
        std::fs::write(root.join("b/c/f"), "x").expect("write");
        std::os::unix::fs::symlink("b", root.join("link")).expect("symlink");
        let got: Vec<String> = walk(root)
            .expect("walk")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        assert_eq!(got, ["a", "b", "b/c", "b/c/d", "b/c/f", "b/e", "link"]);
    }
}
