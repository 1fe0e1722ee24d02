//! Importing a bundle into a staging directory, refusing anything unsafe or inconsistent.

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

fn parse_time(v: &[u8]) -> Option<(i64, i64)> {
    let s = std::str::from_utf8(v).ok()?;
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: i128 = int.parse().ok()?;
    let mut digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    while digits.len() < 9 {
        digits.push('0');
    }
    let nsec: i128 = digits.parse().ok()?;
    let mut total = sec * 1_000_000_000 + nsec;
    if neg {
        total = -total;
    }
    let s = total.div_euclid(1_000_000_000);
    let n = total.rem_euclid(1_000_000_000);
    Some((i64::try_from(s).ok()?, n as i64))
}

/// `size:off+len,...`
fn parse_sparse(v: &[u8]) -> Option<(u64, Vec<(u64, u64)>)> {
    let s = std::str::from_utf8(v).ok()?;
    let (size, map) = s.split_once(':')?;
    let size: u64 = size.parse().ok()?;
    let mut segs = Vec::new();
    let mut end = 0u64;
    for seg in map.split(',').filter(|s| !s.is_empty()) {
        let (o, l) = seg.split_once('+')?;
        let (o, l): (u64, u64) = (o.parse().ok()?, l.parse().ok()?);
        let e = o.checked_add(l)?;
        if o < end || e > size {
            return None;
        }
        end = e;
        segs.push((o, l));
    }
    Some((size, segs))
}

impl State<'_> {
    fn bad_entry(&self, name: &str, message: impl std::fmt::Display) -> Error {
        bad(self.src, format!("entry {name}: {message}"))
    }

    fn new_node(&self, id: &str, strict: bool, held: bool) -> Result<NodeState> {
        let dir = self.staging.join(id);
        if !held {
            match self.opts.make_layer_dir {
                Some(make) => make(&dir),
                None => DirBuilder::new().mode(0o700).create(&dir),
            }
            .map_err(|e| io_fail(self.src, &dir, "creating staged layer", e))?;
        }
        let mut kinds = HashMap::new();
        kinds.insert(PathBuf::new(), Kind::Dir);
        Ok(NodeState {
            dir,
            kinds,
            root_seen: false,
            entries: 0,
            hasher: blake3::Hasher::new(),
            checked_parent: None,
            dirs: Vec::new(),
            strict,
            held,
        })
    }

    fn read_json<T: serde::de::DeserializeOwned, R: Read>(
        &self,
        name: &str,
        e: &mut tar::Entry<'_, R>,
    ) -> Result<T> {
        if e.size() > MAX_JSON {
            return Err(self.bad_entry(name, "too large"));
        }
        // The format requires a content checksum on every regular file of a history or
        // snapshot bundle, these two records included: a manifest or end record without
        // one is not what `agentbox export` writes, and nothing of it is believed.
        let mut want = None;
        if let Some(exts) = e
            .pax_extensions()
            .map_err(|err| self.bad_entry(name, format!("reading PAX records: {err}")))?
        {
            for x in exts {
                let x = x.map_err(|err| self.bad_entry(name, format!("bad PAX record: {err}")))?;
                if x.key_bytes() == PAX_BLAKE3.as_bytes() {
                    want = Some(x.value_bytes().to_vec());
                }
            }
        }
        let Some(want) = want else {
            return Err(self.bad_entry(
                name,
                format!(
                    "no {PAX_BLAKE3} record: the format requires a checksum on {name} \
                     (every bundle `agentbox export` writes has one)"
                ),
            ));
        };
        let mut data = Vec::new();
        e.read_to_end(&mut data)
            .map_err(|err| self.bad_entry(name, format!("reading: {err} (truncated?)")))?;
        if data.len() as u64 != e.size() {
            return Err(self.bad_entry(name, "truncated"));
        }
        let got = blake3::hash(&data).to_hex();
        if want != got.as_bytes() {
            return Err(self.bad_entry(
                name,
                format!(
                    "checksum mismatch: content hashes to {got}, the archive records {}",
                    String::from_utf8_lossy(&want)
                ),
            ));
        }
        serde_json::from_slice(&data)
            .map_err(|err| self.bad_entry(name, format!("invalid JSON: {err}")))
    }

    fn entry<R: Read>(&mut self, e: &mut tar::Entry<'_, R>) -> Result<()> {
        let raw = e.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        self.last = name.clone();
        if e.header().entry_type().is_pax_global_extensions() {
            return Ok(());
        }
        let comps = components(&raw).map_err(|m| self.bad_entry(&name, m))?;
        if self.first {
            self.first = false;
            if is(&comps, MANIFEST_NAME) {
                let m: Manifest = self.read_json(&name, e)?;
                m.validate().map_err(|msg| self.bad_entry(&name, msg))?;
                self.kind = m.kind;
                for n in &m.nodes {
                    let ns = self.new_node(&n.id, true, (self.held)(&n.id))?;
                    self.nodes.insert(n.id.clone(), ns);
                    self.order.push(n.id.clone());
                }
                self.manifest = Some(m);
                return Ok(());
            }
            if is(&comps, END_NAME) || comps.first().is_some_and(|c| c == NODES_DIR) {
                return Err(self.bad_entry(
                    &name,
                    format!("{MANIFEST_NAME} must be the first entry of a bundle"),
                ));
            }
            self.kind = BundleKind::Rootfs;
            let ns = self.new_node(ROOTFS_LAYER, false, false)?;
            self.nodes.insert(ROOTFS_LAYER.to_owned(), ns);
            self.order.push(ROOTFS_LAYER.to_owned());
        }
        if self.kind == BundleKind::Rootfs {
            return self.extract(ROOTFS_LAYER, &name, comps, e);
        }
        if self.end.is_some() {
            return Err(self.bad_entry(&name, format!("entry after {END_NAME}")));
        }
        if is(&comps, END_NAME) {
            let end: EndRecord = self.read_json(&name, e)?;
            self.end = Some(end);
            return Ok(());
        }
        if is(&comps, MANIFEST_NAME) {
            return Err(self.bad_entry(&name, "a second manifest"));
        }
        if comps.len() >= 2 && comps[0] == OsStr::new(NODES_DIR) {
            let id = comps[1].to_string_lossy().into_owned();
            if !self.nodes.contains_key(&id) {
                return Err(self.bad_entry(
                    &name,
                    format!("belongs to node {id}, which the manifest does not list"),
                ));
            }
            let rest = comps[2..].to_vec();
            return self.extract(&id, &name, rest, e);
        }
        Err(self.bad_entry(&name, format!("unexpected entry outside {NODES_DIR}/")))
    }

    fn extract<R: Read>(
        &mut self,
        id: &str,
        name: &str,
        comps: Vec<OsString>,
        e: &mut tar::Entry<'_, R>,
    ) -> Result<()> {
        let rel: PathBuf = comps.iter().collect();
        let h = e.header().clone();
        let typ = h.entry_type();
        let mut pax: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some(exts) = e
            .pax_extensions()
            .map_err(|err| self.bad_entry(name, format!("reading PAX records: {err}")))?
        {
            for x in exts {
                let x = x.map_err(|err| self.bad_entry(name, format!("bad PAX record: {err}")))?;
                let key = x
                    .key()
                    .map_err(|err| self.bad_entry(name, format!("bad PAX key: {err}")))?;
                pax.push((key.to_owned(), x.value_bytes().to_vec()));
            }
        }
        let get = |k: &str| pax.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let perm = h.mode().map_err(|err| self.bad_entry(name, err))? & 0o7777;
        let uid = h.uid().map_err(|err| self.bad_entry(name, err))?;
        let gid = h.gid().map_err(|err| self.bad_entry(name, err))?;
        let (mtime_sec, mtime_nsec) = match get("mtime") {
            Some(v) => parse_time(&v).ok_or_else(|| self.bad_entry(name, "bad PAX mtime"))?,
            None => (
                h.mtime().map_err(|err| self.bad_entry(name, err))? as i64,
                0,
            ),
        };
        let mut xattrs = std::collections::BTreeMap::new();
        for (k, v) in &pax {
            if let Some(x) = k.strip_prefix(PAX_XATTR_PREFIX) {
                xattrs.insert(x.to_owned(), v.clone());
            } else if let Some(x) = k.strip_prefix(PAX_XATTR_HEX_PREFIX) {
                let value = decode_hex(v)
                    .ok_or_else(|| self.bad_entry(name, format!("bad hex value of xattr {x}")))?;
                xattrs.insert(x.to_owned(), value);
            }
        }
        let strict_kind = self.kind != BundleKind::Rootfs;
        let opts = *self.opts;
        let src = self.src.to_owned();
        let bad_entry = |m: String| bad(&src, format!("entry {name}: {m}"));
        let Some(ns) = self.nodes.get_mut(id) else {
            return Err(bad_entry("unknown layer".to_owned()));
        };
        // Every check below runs for a held node too; only the writes are left out.
        let write = !ns.held;
        let is_root = rel.as_os_str().is_empty();
        if is_root {
            if !typ.is_dir() {
                return Err(bad_entry("the layer root must be a directory".to_owned()));
            }
            if ns.root_seen {
                return Err(bad_entry("duplicate entry".to_owned()));
            }
            ns.root_seen = true;
        } else {
            if ns.kinds.contains_key(&rel) {
                return Err(bad_entry("duplicate entry".to_owned()));
            }
            let parent = rel.parent().map(Path::to_owned).unwrap_or_default();
            match ns.kinds.get(&parent) {
                Some(Kind::Dir) => {}
                Some(k) => {
                    return Err(bad_entry(format!(
                        "its parent {} is a {k:?}, not a directory (symlinks are never followed)",
                        parent.display()
                    )))
                }
                None if ns.strict => {
                    return Err(bad_entry(format!(
                        "its parent directory {} is not an earlier entry of the layer",
                        parent.display()
                    )))
                }
                None => {
                    let mut acc = PathBuf::new();
                    for c in parent.components() {
                        acc.push(c);
                        match ns.kinds.get(&acc) {
                            Some(Kind::Dir) => {}
                            Some(k) => {
                                return Err(bad_entry(format!(
                                    "its ancestor {} is a {k:?}, not a directory (symlinks are never followed)",
                                    acc.display()
                                )))
                            }
                            None => {
                                let p = ns.dir.join(&acc);
                                if write {
                                    let what = format!("entry {name}: creating a parent");
                                    DirBuilder::new()
                                        .mode(0o755)
                                        .create(&p)
                                        .map_err(|err| io_fail(&src, &p, &what, err))?;
                                }
                                ns.kinds.insert(acc.clone(), Kind::Dir);
                            }
                        }
                    }
                }
            }
            // Entries come directory by directory: a parent checked for the previous entry
            // needs no second look.
            if write && ns.checked_parent.as_ref() != Some(&parent) {
                let pmd = std::fs::symlink_metadata(ns.dir.join(&parent))
                    .map_err(|err| bad_entry(format!("lstat of its parent: {err}")))?;
                if !pmd.is_dir() {
                    return Err(bad_entry("its parent is not a real directory".to_owned()));
                }
                ns.checked_parent = Some(parent);
            }
        }
        let target = fsutil::join(&ns.dir, &rel);
        let ioe = |what: &str, err: io::Error| {
            if io_is_no_space(&err) {
                Error::NoSpace {
                    path: target.clone(),
                    detail: format!("entry {name}: {what}: {err}"),
                }
            } else {
                bad(&src, format!("entry {name}: {what}: {err}"))
            }
        };
        let mut record = Record {
            rel: rel.as_os_str().as_bytes().to_vec(),
            typ: b'0',
            perm,
            uid,
            gid,
            mtime_sec,
            mtime_nsec,
            size: 0,
            link: Vec::new(),
            major: 0,
            minor: 0,
            xattrs: xattrs.clone(),
        };
        if get(PAX_TYPE).is_some() && !typ.is_fifo() {
            return Err(bad_entry(format!("{PAX_TYPE} on a non-fifo entry")));
        }
        let kind: Kind;
        let mut hardlink = false;
        // A regular file stays open for its metadata, which is then set through the
        // descriptor (no path lookup per call).
        let mut file: Option<File> = None;
        if typ.is_file() || typ.is_contiguous() || typ.is_gnu_sparse() {
            kind = Kind::File;
            let f = if write {
                Some(
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                        .open(&target)
                        .map_err(|err| ioe("create", err))?,
                )
            } else {
                None
            };
            let payload = e.size();
            if let Some((left, limit)) = self.budget.remaining() {
                if payload > left {
                    return Err(too_large(
                        &src,
                        limit,
                        &opts,
                        &format!(
                            "entry {name} declares {payload} bytes, refused before writing it"
                        ),
                    ));
                }
            }
            let sparse = match get(PAX_SPARSE) {
                Some(v) => {
                    let (size, segs) =
                        parse_sparse(&v).ok_or_else(|| bad_entry("bad sparse map".to_owned()))?;
                    if segs.iter().map(|(_, l)| l).sum::<u64>() != payload {
                        return Err(bad_entry(
                            "sparse map does not add up to the stored size".to_owned(),
                        ));
                    }
                    Some((size, segs))
                }
                None => None,
            };
            let segs = match &sparse {
                Some((_, s)) => s.clone(),
                None => vec![(0, payload)],
            };
            let mut hasher = blake3::Hasher::new();
            let buf = &mut self.buf;
            for (off, len) in segs {
                let mut done = 0u64;
                while done < len {
                    let want = (len - done).min(buf.len() as u64) as usize;
                    let n = e
                        .read(&mut buf[..want])
                        .map_err(|err| ioe("reading content (truncated or corrupt)", err))?;
                    if n == 0 {
                        return Err(bad_entry(
                            "truncated: the archive ends inside the file's content".to_owned(),
                        ));
                    }
                    hasher.update(&buf[..n]);
                    if let Some(f) = &f {
                        f.write_all_at(&buf[..n], off + done)
                            .map_err(|err| ioe("write", err))?;
                    }
                    done += n as u64;
                }
            }
            let size = match sparse {
                Some((size, _)) => size,
                None => payload,
            };
            if let Some(f) = &f {
                if sparse.is_some() {
                    f.set_len(size).map_err(|err| ioe("set length", err))?;
                }
                if payload >= WRITEBACK_EARLY {
                    // Start the device writes of a big file now, so they overlap the rest of
                    // the unpacking instead of all waiting for the flush that makes the
                    // import durable. Only a hint: that flush reports any write error.
                    let _ = agentbox_sys::writeback::start(f);
                }
            }
            match get(PAX_BLAKE3) {
                Some(want) => {
                    let got = hasher.finalize().to_hex();
                    if want != got.as_bytes() {
                        return Err(bad_entry(format!(
                            "checksum mismatch: content hashes to {got}, the archive records {}",
                            String::from_utf8_lossy(&want)
                        )));
                    }
                }
                None if strict_kind => {
                    return Err(bad_entry(format!("no {PAX_BLAKE3} record")));
                }
                None => {}
            }
            record.size = size;
            file = f;
        } else if typ.is_hard_link() {
            kind = Kind::File;
            hardlink = true;
            record.typ = b'1';
            record.xattrs.clear();
            let link = e
                .link_name_bytes()
                .ok_or_else(|| bad_entry("hardlink without a target".to_owned()))?
                .into_owned();
            let shown = String::from_utf8_lossy(&link).into_owned();
            let lc = components(&link)
                .map_err(|m| bad_entry(format!("hardlink target {shown}: {m}")))?;
            let inner: Vec<OsString> = if strict_kind {
                if lc.len() < 3 || lc[0] != OsStr::new(NODES_DIR) || lc[1] != OsStr::new(id) {
                    return Err(bad_entry(format!(
                        "hardlink target {shown} is outside node {id}"
                    )));
                }
                lc[2..].to_vec()
            } else {
                lc
            };
            let trel: PathBuf = inner.iter().collect();
            match ns.kinds.get(&trel) {
                Some(Kind::Dir) | None => {
                    return Err(bad_entry(format!(
                        "hardlink target {shown} is not an earlier non-directory entry of the layer"
                    )))
                }
                Some(_) => {}
            }
            if write {
                std::fs::hard_link(ns.dir.join(&trel), &target)
                    .map_err(|err| ioe("hardlink", err))?;
            }
            record.link = trel.as_os_str().as_bytes().to_vec();
            ns.kinds.insert(rel.clone(), Kind::File);
        } else if typ.is_symlink() {
            kind = Kind::Symlink;
            record.typ = b'2';
            let link = e
                .link_name_bytes()
                .ok_or_else(|| bad_entry("symlink without a target".to_owned()))?
                .into_owned();
            if link.is_empty() {
                return Err(bad_entry("symlink with an empty target".to_owned()));
            }
            // Any target is fine: a symlink is data. Nothing is ever created through one
            // (parents must be real directories extracted earlier, files are opened with
            // O_NOFOLLOW, hardlink targets are earlier non-directory entries).
            if write {
                std::os::unix::fs::symlink(OsStr::from_bytes(&link), &target)
                    .map_err(|err| ioe("symlink", err))?;
            }
            record.link = link;
        } else if typ.is_dir() {
            kind = Kind::Dir;
            record.typ = b'5';
            if write && !is_root {
                DirBuilder::new()
                    .mode(0o700)
                    .create(&target)
                    .map_err(|err| ioe("mkdir", err))?;
            }
        } else if typ.is_fifo() {
            (kind, record.typ) = match get(PAX_TYPE) {
                None => (Kind::Fifo, b'6'),
                Some(t) if t == PAX_TYPE_SOCKET.as_bytes() => (Kind::Socket, SOCKET_RECORD_TYPE),
                Some(t) => {
                    return Err(bad_entry(format!(
                        "unknown {PAX_TYPE} {:?}",
                        String::from_utf8_lossy(&t)
                    )))
                }
            };
            if write {
                fsutil::mknod(&target, kind, 0).map_err(|err| ioe("mknod", err))?;
            }
        } else if typ.is_character_special() || typ.is_block_special() {
            let (k, t) = if typ.is_character_special() {
                (Kind::CharDev, b'3')
            } else {
                (Kind::BlockDev, b'4')
            };
            if !opts.allow_devices {
                return Err(bad_entry(
                    "device nodes are refused (allow them explicitly to import)".to_owned(),
                ));
            }
            kind = k;
            record.typ = t;
            let major = h
                .device_major()
                .map_err(|err| ioe("device major", err))?
                .unwrap_or(0);
            let minor = h
                .device_minor()
                .map_err(|err| ioe("device minor", err))?
                .unwrap_or(0);
            record.major = major;
            record.minor = minor;
            if write {
                fsutil::mknod(&target, k, rustix::fs::makedev(major, minor))
                    .map_err(|err| ioe("mknod", err))?;
            }
        } else {
            return Err(bad_entry(format!(
                "unsupported tar entry type {:?}",
                typ.as_byte() as char
            )));
        }
        ns.kinds.insert(rel.clone(), kind);
        ns.entries += 1;
        record.hash_into(&mut ns.hasher);
        if hardlink {
            return Ok(());
        }
        let uid32 = u32::try_from(uid).map_err(|_| bad_entry(format!("uid {uid} out of range")))?;
        let gid32 = u32::try_from(gid).map_err(|_| bad_entry(format!("gid {gid} out of range")))?;
        if !write {
            return Ok(());
        }
        if opts.same_owner {
            match &file {
                Some(f) => fsutil::set_owner_fd(f, uid32, gid32),
                None => fsutil::set_owner(&target, uid32, gid32),
            }
            .map_err(|err| ioe("chown", err))?;
        }
        // What the archive says stays in the record (the checksum covers the archive as
        // written); what reaches the disk is filtered. Overlayfs-private attributes are never
        // applied: in a layer overlayfs obeys them (redirects to other paths, metacopy,
        // opaque, whiteouts), and the format carries whiteouts and opaque directories as its
        // own markers, which the store converts itself.
        let mut perm = perm;
        let mut stripped = false;
        if kind != Kind::Dir && kind != Kind::Symlink && !opts.allow_setuid && perm & 0o6000 != 0 {
            perm &= !0o6000;
            stripped = true;
        }
        for (k, v) in &xattrs {
            if is_overlay_xattr(k) {
                self.dropped_overlay_xattrs += 1;
                continue;
            }
            if k == CAPABILITY_XATTR && kind != Kind::Dir {
                if !opts.allow_setuid {
                    stripped = true;
                    continue;
                }
            } else if is_privileged_xattr(k) {
                // Only the host's privileged code sets these (security modules, overlayfs,
                // IMA/EVM); a bundle is a box's text, so none of them reaches the disk.
                self.dropped_privileged_xattrs += 1;
                continue;
            }
            match &file {
                Some(f) => xattr::FileExt::set_xattr(f, k, v),
                None => xattr::set(&target, k, v),
            }
            .map_err(|err| ioe(&format!("setting xattr {k}"), err))?;
        }
        if stripped {
            self.stripped_setuid += 1;
        }
        if kind == Kind::Dir {
            ns.dirs.push((rel, perm, mtime_sec, mtime_nsec));
            return Ok(());
        }
        if let Some(f) = &file {
            fsutil::set_perm_fd(f, perm).map_err(|err| ioe("chmod", err))?;
            fsutil::set_mtime_fd(f, mtime_sec, mtime_nsec).map_err(|err| ioe("set mtime", err))?;
            return Ok(());
        }
        if kind != Kind::Symlink {
            fsutil::set_perm(&target, perm).map_err(|err| ioe("chmod", err))?;
        }
        fsutil::set_mtime(&target, mtime_sec, mtime_nsec).map_err(|err| ioe("set mtime", err))?;
        Ok(())
    }

    fn finish(mut self) -> Result<Imported> {
        if let Some(m) = &self.manifest {
            let Some(end) = self.end.take() else {
                return Err(bad(
                    self.src,
                    format!("truncated: {END_NAME} is missing after entry {}", self.last),
                ));
            };
            let total: u64 = self.nodes.values().map(|n| n.entries).sum();
            if end.nodes != m.nodes.len() as u64 || end.entries != total {
                return Err(bad(
                    self.src,
                    format!(
                        "{END_NAME} records {} nodes and {} entries, the archive holds {} and {total}",
                        end.nodes,
                        end.entries,
                        m.nodes.len()
                    ),
                ));
            }
            // Version 1 records each layer's count and checksum in the manifest, version 2
            // in end.json, in the manifest's node order.
            let (recorded, place): (Vec<(&str, u64, &str)>, &str) = if m.version == 1 {
                if !end.layers.is_empty() {
                    return Err(bad(
                        self.src,
                        format!("{END_NAME} of a version 1 bundle records layers"),
                    ));
                }
                let v1 = m
                    .nodes
                    .iter()
                    .map(|n| {
                        (
                            n.id.as_str(),
                            n.entries.unwrap_or_default(),
                            n.checksum.as_deref().unwrap_or_default(),
                        )
                    })
                    .collect();
                (v1, "the manifest")
            } else {
                let ids: Vec<&str> = end.layers.iter().map(|l| l.id.as_str()).collect();
                let listed: Vec<&str> = m.nodes.iter().map(|n| n.id.as_str()).collect();
                if ids != listed {
                    return Err(bad(
                        self.src,
                        format!(
                            "{END_NAME} records the layers of {ids:?}, the manifest lists {listed:?}"
                        ),
                    ));
                }
                let v2 = end
                    .layers
                    .iter()
                    .map(|l| (l.id.as_str(), l.entries, l.checksum.as_str()))
                    .collect();
                (v2, END_NAME)
            };
            for (id, entries, checksum) in recorded {
                let Some(ns) = self.nodes.get(id) else {
                    continue;
                };
                let got = ns.hasher.finalize().to_hex().to_string();
                if ns.entries != entries || got != checksum {
                    return Err(bad(
                        self.src,
                        format!(
                            "node {id}: the layer holds {} entries with checksum {got}, {place} \
                             records {entries} entries with checksum {checksum}",
                            ns.entries
                        ),
                    ));
                }
                if !ns.root_seen {
                    return Err(bad(
                        self.src,
                        format!("node {id}: the layer has no root entry"),
                    ));
                }
            }
        }
        let mut layers = Vec::new();
        let mut held = Vec::new();
        for id in &self.order {
            let Some(ns) = self.nodes.get_mut(id) else {
                continue;
            };
            if ns.held {
                held.push(id.clone());
                continue;
            }
            for (rel, perm, sec, nsec) in ns.dirs.iter().rev() {
                let p = fsutil::join(&ns.dir, rel);
                fsutil::set_perm(&p, *perm)
                    .and_then(|()| fsutil::set_mtime(&p, *sec, *nsec))
                    .map_err(|e| io_fail(self.src, &p, "directory metadata", e))?;
            }
            layers.push((id.clone(), ns.dir.clone()));
        }
        Ok(Imported {
            kind: self.kind,
            manifest: self.manifest.take(),
            layers,
            stripped_setuid: self.stripped_setuid,
            dropped_overlay_xattrs: self.dropped_overlay_xattrs,
            dropped_privileged_xattrs: self.dropped_privileged_xattrs,
            held,
        })
    }
}

/// The xattr holding a file's capabilities (what makes `ping` work without setuid).
const CAPABILITY_XATTR: &str = "security.capability";

/// An xattr of the `trusted.` or `security.` namespace: read by privileged code only
/// (overlayfs, security modules, IMA/EVM, file capabilities), and settable only with
/// `CAP_SYS_ADMIN` (trusted) or by the security module that owns the name.
fn is_privileged_xattr(name: &str) -> bool {
    name.starts_with("trusted.") || name.starts_with("security.")
}

/// Decode lowercase or uppercase hex; `None` when malformed.
fn decode_hex(v: &[u8]) -> Option<Vec<u8>> {
    if !v.len().is_multiple_of(2) {
        return None;
    }
    v.chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
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
