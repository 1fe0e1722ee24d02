//! Streaming bundle writer.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::compress::{Sink, DEFAULT_ZSTD_LEVEL};
use super::format::{
    BundleKind, Compression, EndRecord, LayerEnd, Manifest, END_NAME, FORMAT_VERSION,
    MANIFEST_NAME, NODES_DIR, PAX_BLAKE3, PAX_SPARSE, PAX_TYPE, PAX_TYPE_SOCKET,
    PAX_XATTR_HEX_PREFIX, PAX_XATTR_PREFIX,
};
use super::fsutil;
use super::layer::{
    plan_entries, plan_layer_at, LayerSource, LayerSummary, PlanKind, Planned, Planner, Summing,
};
use crate::fsops::{Entry, Tree};
use crate::{Error, Result};

/// Files up to this size are read once into memory (a buffer the writer keeps, so no
/// allocation per file); larger ones are read twice (hash, then copy) so that their checksum
/// can precede their content. Reading a file twice costs a second copy out of the page
/// cache: a quarter of a typical dependency tree's bytes sit in files of a few MiB.
const ONE_PASS: u64 = 16 << 20;
const BLOCK: u64 = 512;
const MAX_OCTAL_11: u64 = 0o777_7777_7777;
const MAX_OCTAL_7: u64 = 0o777_7777;

fn werr(path: impl AsRef<Path>, message: impl Into<String>) -> Error {
    Error::Bundle {
        path: path.as_ref().to_owned(),
        message: message.into(),
    }
}

fn lossy(b: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

/// Writes a bundle as a stream: never seeks, never holds a large file in memory.
pub struct BundleWriter<W: Write> {
    out: Sink<W>,
    kind: BundleKind,
    manifest: Option<Manifest>,
    /// Count and checksum of each layer written, for `end.json`.
    written: HashMap<String, LayerSummary>,
    entries: u64,
    rootfs_done: bool,
    buf: Vec<u8>,
    /// The content of the file being written, when it is read once (see [`ONE_PASS`]).
    whole: Vec<u8>,
}

/// One tar member to write.
struct Member<'a> {
    path: &'a [u8],
    typ: u8,
    perm: u32,
    uid: u64,
    gid: u64,
    mtime_sec: i64,
    mtime_nsec: i64,
    size: u64,
    link: Option<&'a [u8]>,
    dev: Option<(u32, u32)>,
    pax: Vec<(String, Vec<u8>)>,
}

fn pax_record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let body = key.len() + value.len() + 3; // ' ' '=' '\n'
    let mut len = body + 1;
    loop {
        let total = body + len.to_string().len();
        if total == len {
            break;
        }
        len = total;
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// `sec.nnnnnnnnn` (negative times as a signed decimal).
pub(crate) fn format_time(sec: i64, nsec: i64) -> String {
    let total = i128::from(sec) * 1_000_000_000 + i128::from(nsec);
    let sign = if total < 0 { "-" } else { "" };
    let a = total.unsigned_abs();
    format!("{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000)
}

/// Feed the data segments `segs` of `file` to `f`, one buffer-full at a time; read errors
/// go through `rerr`.
fn each_chunk(
    file: &File,
    segs: &[(u64, u64)],
    buf: &mut [u8],
    rerr: impl Fn(io::Error) -> Error,
    mut f: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    for &(off, len) in segs {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            file.read_exact_at(&mut buf[..n], off + done)
                .map_err(&rerr)?;
            f(&buf[..n])?;
            done += n as u64;
        }
    }
    Ok(())
}

fn set_field(dst: &mut [u8], src: &[u8]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
}

impl<W: Write> BundleWriter<W> {
    /// A writer of a `kind` bundle into `w`; zstd uses [`DEFAULT_ZSTD_LEVEL`].
    pub fn new(w: W, kind: BundleKind, compression: Compression) -> Result<BundleWriter<W>> {
        BundleWriter::with_level(w, kind, compression, DEFAULT_ZSTD_LEVEL)
    }

    /// Like [`BundleWriter::new`] with a zstd level (clamped to 1..=3).
    pub fn with_level(
        w: W,
        kind: BundleKind,
        compression: Compression,
        zstd_level: i32,
    ) -> Result<BundleWriter<W>> {
        let out = Sink::new(w, compression, zstd_level).map_err(|e| {
            werr(
                "<output>",
                format!("starting {compression} compression: {e}"),
            )
        })?;
        Ok(BundleWriter {
            out,
            kind,
            manifest: None,
            written: HashMap::new(),
            entries: 0,
            rootfs_done: false,
            buf: vec![0u8; 1 << 20],
            whole: Vec::new(),
        })
    }

    /// Write `manifest.json` (version [`FORMAT_VERSION`]); must be the first call for history
    /// and snapshot bundles. Each layer's entry count and checksum go into `end.json` as the
    /// layer is written.
    pub fn write_manifest(&mut self, manifest: &Manifest) -> Result<()> {
        if self.kind == BundleKind::Rootfs {
            return Err(werr(MANIFEST_NAME, "a rootfs bundle has no manifest"));
        }
        if self.manifest.is_some() {
            return Err(werr(MANIFEST_NAME, "manifest already written"));
        }
        if manifest.kind != self.kind {
            return Err(werr(
                MANIFEST_NAME,
                format!(
                    "manifest kind {} does not match the bundle kind {}",
                    manifest.kind, self.kind
                ),
            ));
        }
        if manifest.version != FORMAT_VERSION {
            return Err(werr(
                MANIFEST_NAME,
                format!(
                    "this agentbox writes bundle version {FORMAT_VERSION}, not {}",
                    manifest.version
                ),
            ));
        }
        manifest.validate().map_err(|m| werr(MANIFEST_NAME, m))?;
        let mut json = serde_json::to_vec_pretty(manifest)
            .map_err(|e| werr(MANIFEST_NAME, format!("serialising: {e}")))?;
        json.push(b'\n');
        self.write_small_file(MANIFEST_NAME, &json, manifest.created.timestamp())?;
        self.manifest = Some(manifest.clone());
        Ok(())
    }

    /// Write the layer of node `node_id` under `nodes/<id>/`.
    pub fn write_layer(&mut self, node_id: &str, layer: &LayerSource) -> Result<()> {
        let prefix = self.start_layer(node_id)?;
        let planned = plan_layer_at(layer, Path::new(&prefix))?;
        self.write_layer_of(node_id, &prefix, planned.into_iter().map(Ok))
    }

    /// Write the complete layer of node `node_id` from the entries of its tree as they are
    /// read, in archive order (root first, each parent before its children): each entry is
    /// planned and written before the next is taken, so the tree need not be read whole
    /// first. The first error, of `entries` or of the writing, stops it.
    pub fn write_tree_entries(
        &mut self,
        node_id: &str,
        entries: impl IntoIterator<Item = Result<Entry>>,
    ) -> Result<()> {
        let prefix = self.start_layer(node_id)?;
        let mut planner = Planner::new(true);
        let planned = entries.into_iter().filter_map(|e| {
            e.and_then(|e| planner.entry(&e).map_err(|m| werr(&prefix, m)))
                .transpose()
        });
        self.write_layer_of(node_id, &prefix, planned)
    }

    /// Write the planned entries of node `node_id`'s layer (under `prefix`) and record its
    /// count and checksum for `end.json`.
    fn write_layer_of(
        &mut self,
        node_id: &str,
        prefix: &str,
        planned: impl Iterator<Item = Result<Planned>>,
    ) -> Result<()> {
        let mut sum = Summing::default();
        for p in planned {
            let p = p?;
            sum.add(&p);
            self.write_planned(prefix.as_bytes(), &p, true)?;
        }
        let summary = sum.finish();
        if summary.entries == 0 {
            return Err(werr(prefix, "the layer has no root entry"));
        }
        self.entries += summary.entries;
        self.written.insert(node_id.to_owned(), summary);
        Ok(())
    }

    /// Check that node `node_id` may be written now; its prefix in the archive.
    fn start_layer(&self, node_id: &str) -> Result<String> {
        let prefix = format!("{NODES_DIR}/{node_id}/");
        let Some(manifest) = &self.manifest else {
            return Err(werr(&prefix, "write_manifest must come before any layer"));
        };
        if manifest.node(node_id).is_none() {
            return Err(werr(&prefix, "node is not listed in the manifest"));
        }
        if self.written.contains_key(node_id) {
            return Err(werr(&prefix, "layer already written"));
        }
        Ok(prefix)
    }

    /// Write a complete tree as a rootfs bundle (paths `./…`, sparse files in full, sockets
    /// skipped: `docker import` and GNU tar know no socket entries).
    pub fn write_rootfs(&mut self, tree: &Tree) -> Result<()> {
        if self.kind != BundleKind::Rootfs {
            return Err(werr(
                "./",
                format!("write_rootfs on a {} bundle", self.kind),
            ));
        }
        if self.rootfs_done {
            return Err(werr("./", "rootfs already written"));
        }
        let planned =
            plan_entries(tree.entries.values(), &[], &[], false).map_err(|m| werr("./", m))?;
        for p in &planned {
            self.write_planned(b"./", p, false)?;
        }
        self.entries += planned.len() as u64;
        self.rootfs_done = true;
        Ok(())
    }

    /// Write `end.json` (history, snapshot) and the end-of-archive blocks, finish the
    /// compression and return the output.
    pub fn finish(mut self) -> Result<W> {
        if let Some(m) = &self.manifest {
            // In the manifest's node order, whatever order the layers were written in.
            let mut layers = Vec::with_capacity(m.nodes.len());
            for n in &m.nodes {
                let Some(s) = self.written.get(&n.id) else {
                    return Err(werr(
                        format!("{NODES_DIR}/{}/", n.id),
                        "node is listed in the manifest but its layer was not written",
                    ));
                };
                layers.push(LayerEnd {
                    id: n.id.clone(),
                    entries: s.entries,
                    checksum: s.checksum.clone(),
                });
            }
            let end = EndRecord {
                nodes: self.written.len() as u64,
                entries: self.entries,
                layers,
            };
            let mut json = serde_json::to_vec(&end)
                .map_err(|e| werr(END_NAME, format!("serialising: {e}")))?;
            json.push(b'\n');
            let t = m.created.timestamp();
            self.write_small_file(END_NAME, &json, t)?;
        } else if self.kind != BundleKind::Rootfs {
            return Err(werr(MANIFEST_NAME, "no manifest was written"));
        }
        self.out
            .write_all(&[0u8; 1024])
            .map_err(|e| werr("<end of archive>", format!("writing: {e}")))?;
        self.out
            .finish()
            .map_err(|e| werr("<output>", format!("finishing: {e}")))
    }

    fn write_small_file(&mut self, name: &str, data: &[u8], mtime: i64) -> Result<()> {
        let m = Member {
            path: name.as_bytes(),
            typ: b'0',
            perm: 0o644,
            uid: 0,
            gid: 0,
            mtime_sec: mtime.max(0),
            mtime_nsec: 0,
            size: data.len() as u64,
            link: None,
            dev: None,
            pax: vec![(
                PAX_BLAKE3.to_owned(),
                blake3::hash(data).to_hex().as_bytes().to_vec(),
            )],
        };
        self.write_header(&m)
            .and_then(|()| self.out.write_all(data))
            .and_then(|()| self.pad(data.len() as u64))
            .map_err(|e| werr(name, format!("writing: {e}")))
    }

    /// Whether members carry agentbox's own PAX records (`AGENTBOX.*`: content hashes,
    /// sparse maps, hex-encoded xattrs). A rootfs bundle is a plain tar for other tools
    /// (`docker import`, GNU tar, which warns about every unknown record): it carries none.
    fn private_records(&self) -> bool {
        self.kind != BundleKind::Rootfs
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rem = (size % BLOCK) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; 512][..512 - rem])?;
        }
        Ok(())
    }

    fn write_header(&mut self, m: &Member<'_>) -> io::Result<()> {
        let mut pax = Vec::new();
        let mut h = tar::Header::new_ustar();
        if m.path.len() <= 100 {
            set_field(&mut h.as_old_mut().name, m.path);
        } else {
            pax_record(&mut pax, "path", m.path);
            set_field(&mut h.as_old_mut().name, &m.path[..100]);
        }
        if let Some(link) = m.link {
            if link.len() <= 100 {
                set_field(&mut h.as_old_mut().linkname, link);
            } else {
                pax_record(&mut pax, "linkpath", link);
                set_field(&mut h.as_old_mut().linkname, &link[..100]);
            }
        }
        h.set_mode(m.perm & 0o7777);
        if m.uid > MAX_OCTAL_7 {
            pax_record(&mut pax, "uid", m.uid.to_string().as_bytes());
            h.set_uid(0);
        } else {
            h.set_uid(m.uid);
        }
        if m.gid > MAX_OCTAL_7 {
            pax_record(&mut pax, "gid", m.gid.to_string().as_bytes());
            h.set_gid(0);
        } else {
            h.set_gid(m.gid);
        }
        let plain_time = m.mtime_nsec == 0 && (0..=MAX_OCTAL_11 as i64).contains(&m.mtime_sec);
        if !plain_time {
            pax_record(
                &mut pax,
                "mtime",
                format_time(m.mtime_sec, m.mtime_nsec).as_bytes(),
            );
        }
        h.set_mtime(m.mtime_sec.clamp(0, MAX_OCTAL_11 as i64) as u64);
        if m.size > MAX_OCTAL_11 {
            pax_record(&mut pax, "size", m.size.to_string().as_bytes());
            h.set_size(0);
        } else {
            h.set_size(m.size);
        }
        h.set_entry_type(tar::EntryType::new(m.typ));
        if let Some((major, minor)) = m.dev {
            h.set_device_major(major)?;
            h.set_device_minor(minor)?;
        }
        for (k, v) in &m.pax {
            pax_record(&mut pax, k, v);
        }
        h.set_cksum();
        if !pax.is_empty() {
            let mut x = tar::Header::new_ustar();
            set_field(&mut x.as_old_mut().name, b"././@PaxHeader");
            x.set_mode(0o644);
            x.set_size(pax.len() as u64);
            x.set_mtime(0);
            x.set_entry_type(tar::EntryType::XHeader);
            x.set_cksum();
            self.out.write_all(x.as_bytes())?;
            self.out.write_all(&pax)?;
            self.pad(pax.len() as u64)?;
        }
        self.out.write_all(h.as_bytes())
    }

    fn write_planned(&mut self, prefix: &[u8], p: &Planned, sparse: bool) -> Result<()> {
        let mut path = prefix.to_vec();
        path.extend_from_slice(p.rel.as_os_str().as_bytes());
        let is_root = p.rel.as_os_str().is_empty();
        if matches!(p.kind, PlanKind::Dir) && !is_root {
            path.push(b'/');
        }
        let shown = lossy(&path);
        let meta = &p.meta;
        let private = self.private_records();
        let mut pax: Vec<(String, Vec<u8>)> = Vec::new();
        if !matches!(p.kind, PlanKind::HardLink(_) | PlanKind::Marker) {
            for (k, v) in &meta.xattrs {
                // PAX records are length-prefixed, so any value fits in a standard one;
                // agentbox's own bundles hex-encode values with a newline for their reader.
                if private && v.contains(&b'\n') {
                    let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                    pax.push((format!("{PAX_XATTR_HEX_PREFIX}{k}"), hex.into_bytes()));
                } else {
                    pax.push((format!("{PAX_XATTR_PREFIX}{k}"), v.clone()));
                }
            }
        }
        let mut link_buf = Vec::new();
        let (size, link, dev) = match &p.kind {
            PlanKind::Symlink(t) => {
                link_buf.extend_from_slice(t.as_os_str().as_bytes());
                (0, Some(&link_buf[..]), None)
            }
            PlanKind::HardLink(t) => {
                link_buf.extend_from_slice(prefix);
                link_buf.extend_from_slice(t.as_os_str().as_bytes());
                (0, Some(&link_buf[..]), None)
            }
            PlanKind::CharDev | PlanKind::BlockDev => (
                0,
                None,
                Some((rustix::fs::major(meta.rdev), rustix::fs::minor(meta.rdev))),
            ),
            PlanKind::Socket => {
                pax.push((PAX_TYPE.to_owned(), PAX_TYPE_SOCKET.as_bytes().to_vec()));
                (0, None, None)
            }
            _ => (0, None, None),
        };
        let mut member = Member {
            path: &path,
            typ: p.typ(),
            perm: meta.perm,
            uid: u64::from(meta.uid),
            gid: u64::from(meta.gid),
            mtime_sec: meta.mtime_sec,
            mtime_nsec: meta.mtime_nsec,
            size,
            link,
            dev,
            pax,
        };
        match &p.kind {
            PlanKind::File { src } => {
                let src = src.clone();
                self.write_file(&mut member, &src, meta.size, sparse)
            }
            PlanKind::Marker => {
                if private {
                    member.pax.push((
                        PAX_BLAKE3.to_owned(),
                        blake3::hash(b"").to_hex().as_bytes().to_vec(),
                    ));
                }
                self.write_header(&member)
                    .map_err(|e| werr(&shown, format!("writing: {e}")))
            }
            _ => self
                .write_header(&member)
                .map_err(|e| werr(&shown, format!("writing: {e}"))),
        }
    }

    fn write_file(
        &mut self,
        m: &mut Member<'_>,
        src: &Path,
        size: u64,
        sparse: bool,
    ) -> Result<()> {
        let shown = lossy(m.path);
        let rerr = |e: io::Error| werr(src, format!("reading content of {}: {e}", shown.display()));
        let file: File = OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(src)
            .map_err(rerr)?;
        let segs = if sparse {
            fsutil::data_segments(&file).map_err(rerr)?
        } else {
            None
        };
        let segs = match segs {
            Some(s) => {
                let map: Vec<String> = s.iter().map(|(o, l)| format!("{o}+{l}")).collect();
                m.pax.push((
                    PAX_SPARSE.to_owned(),
                    format!("{size}:{}", map.join(",")).into_bytes(),
                ));
                s
            }
            None => vec![(0, size)],
        };
        let payload: u64 = segs.iter().map(|(_, l)| l).sum();
        m.size = payload;
        let werr_io = |e: io::Error| werr(&shown, format!("writing: {e}"));
        let private = self.private_records();
        if payload <= ONE_PASS {
            let mut data = std::mem::take(&mut self.whole);
            data.clear();
            let result = (|| -> Result<()> {
                for &(off, len) in &segs {
                    let start = data.len();
                    data.resize(start + len as usize, 0);
                    file.read_exact_at(&mut data[start..], off).map_err(rerr)?;
                }
                if private {
                    m.pax.push((
                        PAX_BLAKE3.to_owned(),
                        blake3::hash(&data).to_hex().as_bytes().to_vec(),
                    ));
                }
                self.write_header(m).map_err(werr_io)?;
                self.out.write_all(&data).map_err(werr_io)?;
                self.pad(payload).map_err(werr_io)
            })();
            self.whole = data;
            return result;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let result = (|| -> Result<()> {
            if private {
                // The hash goes in the header, before the content: a first pass makes it.
                let mut hasher = blake3::Hasher::new();
                each_chunk(&file, &segs, &mut buf, rerr, |chunk| {
                    hasher.update(chunk);
                    Ok(())
                })?;
                m.pax.push((
                    PAX_BLAKE3.to_owned(),
                    hasher.finalize().to_hex().as_bytes().to_vec(),
                ));
            }
            self.write_header(m).map_err(werr_io)?;
            each_chunk(&file, &segs, &mut buf, rerr, |chunk| {
                self.out.write_all(chunk).map_err(werr_io)
            })?;
            self.pad(payload).map_err(werr_io)
        })();
        self.buf = buf;
        result
    }
}
