//! Importing a bundle into a staging directory, refusing anything unsafe or inconsistent.
//!
//! This file holds the import API, the size limits and the readers that enforce them, and
//! the unpacking state; `entries` walks the tar stream and checks the whole, `extract`
//! writes one layer entry.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::compress::{decompress_in_thread, expect_tar};
use super::format::{
    BundleKind, EndRecord, Manifest, END_NAME, MANIFEST_NAME, NODES_DIR, PAX_BLAKE3, PAX_SPARSE,
    PAX_TYPE, PAX_TYPE_SOCKET, PAX_XATTR_HEX_PREFIX, PAX_XATTR_PREFIX, ROOTFS_LAYER,
};
use super::fsutil;
use super::layer::{Record, SOCKET_RECORD_TYPE};
use crate::error::io_is_no_space;
use crate::fsops::scan::is_overlay_xattr;
use crate::fsops::Kind;
use crate::{Error, Result};

mod entries;
mod extract;

/// Files at least this big have their device writes started as soon as they are written
/// (see [`State::extract`]); for smaller ones the extra system call costs more than the
/// overlap gains.
const WRITEBACK_EARLY: u64 = 256 << 10;

/// Largest manifest or end record accepted.
const MAX_JSON: u64 = 256 << 20;

/// Default decompressed-size limit, as a multiple of the compressed size.
///
/// Why 64: zstd and gzip shrink source trees, binaries and package caches 3–10×, and even a
/// bundle full of logs or mostly-zero images stays well under 64× over its whole length,
/// while a decompression bomb expands hundreds to tens of thousands of times (zstd turns a
/// few KiB into GiBs of zeros). The ratio is measured over the whole stream, so a
/// compressible stretch inside an ordinary bundle does not trip it.
pub const MAX_EXPANSION: u64 = 64;

/// Floor of the default decompressed-size limit: small bundles of very redundant data (a
/// few MiB of mostly-zero files) stay importable, and a bomb made of a tiny file stops at
/// 256 MiB of tar data. Why not more: the floor is what any bundle of a few KiB may write
/// to the store before being refused (it was 16 GiB, enough to fill a small disk), and an
/// ordinary bundle's limit is its own 64× long before the floor matters. Sparse files
/// travel as their data segments, so a sparse image costs the floor nothing; a bundle of
/// real zeros (a preallocated image) past it needs `--max-size`.
pub const MIN_MAX_SIZE: u64 = 256 << 20;

/// The default decompressed-size limit for a bundle of `compressed` bytes:
/// `max(MAX_EXPANSION × compressed, MIN_MAX_SIZE)`.
pub fn default_max_size(compressed: u64) -> u64 {
    compressed.saturating_mul(MAX_EXPANSION).max(MIN_MAX_SIZE)
}

/// Options of [`import`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOpts {
    /// Create character and block devices (refused otherwise).
    pub allow_devices: bool,
    /// Give entries the owners recorded in the bundle (needs root); otherwise they belong to
    /// the importing user.
    pub same_owner: bool,
    /// Keep the setuid and setgid bits and `security.capability` xattrs of non-directories.
    /// Off (the default), they are stripped: a bundle may come from an untrusted box, and a
    /// setuid-root or capability-carrying file in the store is a privilege waiting for a
    /// host user. The number of files stripped is in [`Imported::stripped_setuid`].
    /// (Setgid on a directory only sets the group of new files and is kept.)
    pub allow_setuid: bool,
    /// Creates each staged layer directory (default: a plain directory). A store backend
    /// passes its own so a layer can be adopted without copying (a btrfs subvolume).
    pub make_layer_dir: Option<fn(&Path) -> std::io::Result<()>>,
    /// Stop once the decompressed tar stream passes this many bytes. `None`: the default,
    /// [`default_max_size`] of the file's size; for stdin, whose size is unknown, the same
    /// formula applied to the compressed bytes read so far.
    pub max_size: Option<u64>,
}

/// What [`import`] staged.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub kind: BundleKind,
    /// The manifest (history and snapshot bundles).
    pub manifest: Option<Manifest>,
    /// `(node id, staged layer dir)` in manifest order; `("rootfs", dir)` for a rootfs.
    pub layers: Vec<(String, PathBuf)>,
    /// Files whose setuid/setgid bits or `security.capability` xattr were stripped (see
    /// [`ImportOpts::allow_setuid`]).
    pub stripped_setuid: u64,
    /// Overlayfs-private xattrs (`trusted.overlay.*`, `user.overlay.*`) found in the archive
    /// and not applied. `agentbox export` never writes them (whiteouts and opaque
    /// directories travel as the format's own markers), so a non-zero count means a crafted
    /// or foreign archive; overlayfs would obey them (redirects, metacopy, opaque).
    pub dropped_overlay_xattrs: u64,
    /// Other `trusted.*` and `security.*` xattrs found in the archive and not applied
    /// (SELinux labels, IMA/EVM, `security.capability` on a directory): only the host's
    /// privileged code may set them, and a bundle may come from an untrusted box.
    pub dropped_privileged_xattrs: u64,
    /// Nodes the caller said it holds already (see [`import_into`]), in manifest order:
    /// their entries were read and checked like any others, and nothing of them was written
    /// (they are not in `layers`).
    pub held: Vec<String>,
}

/// Extract the bundle `src` (a file, or `-` for stdin; plain, gzip or zstd, detected by
/// magic bytes) into `staging` (which must not exist or be empty): each node's layer goes to
/// `staging/<id>/` (a rootfs to `staging/rootfs/`), whiteout and opaque markers kept as
/// empty regular files. On any error `staging` is removed entirely.
///
/// A full disk (ENOSPC, EDQUOT) is [`Error::NoSpace`], never blamed on the archive; passing
/// the decompressed-size limit ([`ImportOpts::max_size`]) is [`Error::TooLarge`].
pub fn import(src: &Path, staging: &Path, opts: &ImportOpts) -> Result<Imported> {
    import_into(src, staging, opts, &|_| false)
}

/// [`import`] for a store that already holds some of the bundle's nodes: the layer of every
/// node for which `held(id)` is true is read, hashed and checked against the manifest as
/// usual (a corrupt or inconsistent bundle is refused all the same), but nothing of it is
/// written to `staging`; the node is listed in [`Imported::held`]. Unpacking a layer only
/// to find its node present and delete it again cost as much as the import itself (a 32k-file
/// snapshot into the store that exported it: 2.6 s, 0.8 s of it the removal).
pub fn import_into(
    src: &Path,
    staging: &Path,
    opts: &ImportOpts,
    held: &dyn Fn(&str) -> bool,
) -> Result<Imported> {
    match std::fs::symlink_metadata(staging) {
        Ok(md) if md.is_dir() => {
            let mut rd = std::fs::read_dir(staging).map_err(|e| bad(staging, e.to_string()))?;
            if rd.next().is_some() {
                return Err(bad(
                    staging,
                    "staging directory exists and is not empty".to_owned(),
                ));
            }
        }
        Ok(_) => {
            return Err(bad(
                staging,
                "staging path exists and is not a directory".to_owned(),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(staging)
                .map_err(|e| io_fail(staging, staging, "creating staging directory", e))?;
        }
        Err(e) => return Err(bad(staging, e.to_string())),
    }
    let tripped = Rc::new(Cell::new(None));
    // The device writes the unpacked files while the rest is unpacked (see `Flusher`); the
    // caller's final flush makes them durable.
    let flusher = crate::fsops::flusher::Flusher::start(staging);
    let result =
        import_inner(src, staging, opts, held, &tripped).map_err(|e| match tripped.get() {
            // Whatever error the cut-off stream caused downstream, the cause is the limit.
            Some(limit) => too_large(src, limit, opts, "stopped there"),
            None => e,
        });
    drop(flusher);
    if result.is_err() {
        let _ = fsutil::remove_tree(staging);
    }
    result
}

/// The error of an import that passed its decompressed-size `limit`; `what` says where
/// it stopped.
fn too_large(src: &Path, limit: u64, opts: &ImportOpts, what: &str) -> Error {
    Error::TooLarge {
        path: src.to_owned(),
        message: format!(
            "the archive expands past {limit} bytes of tar data, the import limit ({}); {what}",
            match opts.max_size {
                Some(_) => "set explicitly".to_owned(),
                None => format!(
                    "{MAX_EXPANSION} × the compressed size, at least {} MiB",
                    MIN_MAX_SIZE >> 20
                ),
            }
        ),
    }
}

/// An IO failure at `path` while importing `src`: [`Error::NoSpace`] for a full filesystem
/// or quota, else a bundle error.
fn io_fail(src: &Path, path: &Path, what: &str, e: io::Error) -> Error {
    if io_is_no_space(&e) {
        Error::NoSpace {
            path: path.to_owned(),
            detail: format!("{what}: {e}"),
        }
    } else {
        bad(src, format!("{}: {what}: {e}", path.display()))
    }
}

/// Counts the bytes read from the (compressed) input.
struct Counted<R> {
    inner: R,
    /// Shared with the unpacking thread, which reads it for [`Limit::OfCompressed`].
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        agentbox_core::progress::add(n as u64);
        Ok(n)
    }
}

/// The decompressed-size limit of an import.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Fixed(u64),
    /// [`default_max_size`] of the compressed bytes read so far (input of unknown size).
    OfCompressed,
}

/// How much tar data the import has read, against its limit; shared by the reader that
/// enforces it ([`Limited`]) and the unpacker, which refuses an entry whose declared size
/// alone would pass the limit before writing a byte of it.
struct Budget {
    read: Cell<u64>,
    limit: Limit,
    compressed: Arc<AtomicU64>,
}

impl Budget {
    fn limit(&self) -> u64 {
        match self.limit {
            Limit::Fixed(n) => n,
            Limit::OfCompressed => default_max_size(self.compressed.load(Ordering::Relaxed)),
        }
    }

    /// The bytes that may still be read, when the limit is known up front (a file); `None`
    /// for stdin, whose limit grows with the compressed bytes read.
    fn remaining(&self) -> Option<(u64, u64)> {
        match self.limit {
            Limit::Fixed(n) => Some((n.saturating_sub(self.read.get()), n)),
            Limit::OfCompressed => None,
        }
    }
}

/// Fails every read once more than the limit has come out of the decompressor, and
/// records the limit in `tripped` so the import reports the cause, not the symptom.
struct Limited<R> {
    inner: R,
    budget: Rc<Budget>,
    tripped: Rc<Cell<Option<u64>>>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let limit = self.budget.limit();
        if self.budget.read.get() > limit {
            self.tripped.set(Some(limit));
            return Err(io::Error::other("decompressed-size limit exceeded"));
        }
        let n = self.inner.read(buf)?;
        let read = self.budget.read.get().saturating_add(n as u64);
        self.budget.read.set(read);
        if read > limit {
            self.tripped.set(Some(limit));
            return Err(io::Error::other("decompressed-size limit exceeded"));
        }
        Ok(n)
    }
}

fn bad(path: &Path, message: String) -> Error {
    Error::Bundle {
        path: path.to_owned(),
        message,
    }
}

/// Remembers whether the underlying stream ended.
struct Tracker<R> {
    inner: R,
    eof: bool,
}

impl<R: Read> Read for Tracker<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        Ok(n)
    }
}

fn import_inner(
    src: &Path,
    staging: &Path,
    opts: &ImportOpts,
    held: &dyn Fn(&str) -> bool,
    tripped: &Rc<Cell<Option<u64>>>,
) -> Result<Imported> {
    let (input, size): (Box<dyn Read + Send>, Option<u64>) = if src == Path::new("-") {
        (Box::new(io::stdin()), None)
    } else {
        let f = File::open(src).map_err(|e| bad(src, format!("opening: {e}")))?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(f), size)
    };
    let limit = match (opts.max_size, size) {
        (Some(n), _) => Limit::Fixed(n),
        (None, Some(size)) => Limit::Fixed(default_max_size(size)),
        (None, None) => Limit::OfCompressed,
    };
    let compressed = Arc::new(AtomicU64::new(0));
    let input = Box::new(io::BufReader::with_capacity(
        256 << 10,
        Counted {
            inner: input,
            count: compressed.clone(),
        },
    ));
    // Decompression runs beside the unpacking (one core each).
    let dec = decompress_in_thread(input).map_err(|e| bad(src, format!("decompressing: {e}")))?;
    let budget = Rc::new(Budget {
        read: Cell::new(0),
        limit,
        compressed,
    });
    let dec: Box<dyn Read> = Box::new(Limited {
        inner: dec,
        budget: budget.clone(),
        tripped: tripped.clone(),
    });
    let tarr = expect_tar(dec).map_err(|e| bad(src, e.to_string()))?;
    let mut archive = tar::Archive::new(Tracker {
        inner: tarr,
        eof: false,
    });
    let mut st = State {
        src,
        staging,
        opts,
        held,
        first: true,
        kind: BundleKind::Rootfs,
        manifest: None,
        nodes: HashMap::new(),
        order: Vec::new(),
        end: None,
        last: String::from("<start>"),
        stripped_setuid: 0,
        dropped_overlay_xattrs: 0,
        dropped_privileged_xattrs: 0,
        budget,
        buf: vec![0u8; 1 << 20],
    };
    {
        let entries = archive
            .entries()
            .map_err(|e| bad(src, format!("reading the archive: {e}")))?;
        for item in entries {
            let mut entry = item.map_err(|e| {
                bad(
                    src,
                    format!(
                        "reading the archive after entry {}: {e} (truncated or corrupt)",
                        st.last
                    ),
                )
            })?;
            st.entry(&mut entry)?;
        }
    }
    let mut tracker = archive.into_inner();
    if st.first {
        return Err(bad(src, "the archive holds no entry".to_owned()));
    }
    if tracker.eof {
        return Err(bad(
            src,
            format!(
                "truncated: the archive ends after entry {} without the end-of-archive blocks",
                st.last
            ),
        ));
    }
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match tracker.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(bad(
                    src,
                    format!("reading past the end of the archive: {e} (truncated or corrupt)"),
                ))
            }
        };
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|b| *b != 0) {
            return Err(bad(
                src,
                "trailing garbage after the end of the archive".to_owned(),
            ));
        }
    }
    st.finish()
}

/// Per-layer extraction state.
struct NodeState {
    dir: PathBuf,
    /// Kind of each extracted relative path (the root is a directory).
    kinds: HashMap<PathBuf, Kind>,
    root_seen: bool,
    entries: u64,
    hasher: blake3::Hasher,
    /// Directories whose mode and mtime are set once their children exist.
    dirs: Vec<(PathBuf, u32, i64, i64)>,
    /// Parents must be earlier entries (history/snapshot); a rootfs gets missing parents.
    strict: bool,
    /// The parent directory last found to be a real directory on disk.
    checked_parent: Option<PathBuf>,
    /// The caller holds this node already: its entries are read, checked and hashed, and
    /// nothing is written (`dir` is never created).
    held: bool,
}

struct State<'a> {
    src: &'a Path,
    staging: &'a Path,
    opts: &'a ImportOpts,
    /// Whether the caller holds a node already (see [`import_into`]).
    held: &'a dyn Fn(&str) -> bool,
    first: bool,
    kind: BundleKind,
    manifest: Option<Manifest>,
    nodes: HashMap<String, NodeState>,
    order: Vec<String>,
    end: Option<EndRecord>,
    last: String,
    stripped_setuid: u64,
    dropped_overlay_xattrs: u64,
    dropped_privileged_xattrs: u64,
    budget: Rc<Budget>,
    /// The copy buffer of file contents, one for the whole import (most files are a few
    /// KiB: a fresh zeroed MiB per file would cost more than their data).
    buf: Vec<u8>,
}

fn components(raw: &[u8]) -> std::result::Result<Vec<OsString>, String> {
    if raw.is_empty() {
        return Err("empty path".to_owned());
    }
    let mut out = Vec::new();
    for c in Path::new(OsStr::from_bytes(raw)).components() {
        match c {
            Component::Normal(n) => out.push(n.to_owned()),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute path refused".to_owned())
            }
            Component::ParentDir => return Err("path with a `..` component refused".to_owned()),
        }
    }
    Ok(out)
}

fn is(comps: &[OsString], name: &str) -> bool {
    comps.len() == 1 && comps[0] == OsStr::new(name)
}

#[cfg(test)]
mod tests {
    use super::extract::is_privileged_xattr;
    use super::*;

    fn fixed(n: u64) -> Rc<Budget> {
        Rc::new(Budget {
            read: Cell::new(0),
            limit: Limit::Fixed(n),
            compressed: Arc::new(AtomicU64::new(0)),
        })
    }

    #[test]
    fn the_default_limit_is_a_multiple_of_the_compressed_size_with_a_floor() {
        assert_eq!(default_max_size(0), MIN_MAX_SIZE);
        assert_eq!(default_max_size(1 << 20), MIN_MAX_SIZE);
        assert_eq!(default_max_size(16 << 20), 1 << 30);
        assert_eq!(default_max_size(1 << 30), 64 << 30);
        assert_eq!(default_max_size(u64::MAX), u64::MAX);
        // A bundle of a few KiB cannot make the store write GiBs before it is refused.
        assert!(default_max_size(4 << 10) <= 256 << 20);
    }

    #[test]
    fn privileged_xattrs_are_the_trusted_and_security_namespaces() {
        for n in [
            "trusted.overlay.opaque",
            "trusted.x",
            "security.selinux",
            "security.ima",
        ] {
            assert!(is_privileged_xattr(n), "{n}");
        }
        for n in [
            "user.x",
            "system.posix_acl_access",
            "user.overlay.opaque",
            "trustedx",
        ] {
            assert!(!is_privileged_xattr(n), "{n}");
        }
    }

    #[test]
    fn the_limited_reader_fails_past_the_limit_and_says_so() {
        let tripped = Rc::new(Cell::new(None));
        let mut r = Limited {
            inner: io::repeat(7).take(10_000),
            budget: fixed(4096),
            tripped: tripped.clone(),
        };
        let mut buf = Vec::new();
        assert!(r.read_to_end(&mut buf).is_err());
        assert_eq!(tripped.get(), Some(4096));
        assert!(buf.len() <= 4096 + 8192, "{}", buf.len());

        let tripped = Rc::new(Cell::new(None));
        let mut r = Limited {
            inner: io::repeat(7).take(4096),
            budget: fixed(4096),
            tripped: tripped.clone(),
        };
        let mut buf = Vec::new();
        r.read_to_end(&mut buf).expect("exactly the limit is fine");
        assert_eq!(buf.len(), 4096);
        assert_eq!(tripped.get(), None);
    }
}
