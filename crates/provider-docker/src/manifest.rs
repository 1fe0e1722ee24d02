//! What a node of a Docker box holds, and what changed between two nodes.
//!
//! A node is an image; what is in it is read from a container made from it and never
//! started (a *look*), through the engine's archive API: the tar of its `/` streams to the
//! host, which keeps of each entry only its path, kind, mode, owner, size, link target
//! and — for a regular file — the BLAKE3 hash of its content (a [`Manifest`]). Nothing of
//! the tar is written to a host path: it is data. The manifest is kept on the host with
//! the box (`docker-manifests/<image id>.json` in the box's directory; a node's image never
//! changes), so each node is read once. Two manifests compare on the host ([`diff`]) as
//! the store compares two trees: added, removed, modified (kind, size, target or content),
//! metadata changed (mode, owner); modification times are not compared.
//!
//! Left out of every manifest: the box's ignored paths (relative to `/`, as capture
//! leaves them out) and what the engine writes into every container itself
//! ([`ENGINE_MADE`]).
//!
//! A change's content (`diff --patch`) is read the same way, one file at a time
//! ([`agentbox_docker::Engine::download_file`], at most [`PATCH_LIMIT`] bytes) from a look
//! of each node, and compared on the host.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use agentbox_boxes::records::record::{self, BoxDirs, BoxRecord};
use agentbox_boxes::Result;
use agentbox_docker::container::ContainerSpec;
use agentbox_docker::download::Downloaded;
use agentbox_docker::Engine;
use agentbox_store::fsops::{Change, ChangeKind};
use serde::{Deserialize, Serialize};

use crate::errors::remote;
use crate::names;
use crate::provider::DockerProvider;

/// Paths the engine makes in every container (its init, the name and resolver files it
/// binds at start): never a box's change.
const ENGINE_MADE: &[&str] = &[
    ".dockerenv",
    "etc/hostname",
    "etc/hosts",
    "etc/resolv.conf",
    "sbin/docker-init",
];

/// The most entries a manifest takes (a root with more is refused, not cut short).
const MAX_ENTRIES: usize = 4_000_000;

/// The most of one file read for a patch: larger files are named, not compared (as the
/// store's patches do).
pub const PATCH_LIMIT: u64 = 1 << 20;

/// The directory, in a box's directory, of its nodes' manifests.
const DIR: &str = "docker-manifests";

/// One entry of a node's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// `f` file, `d` directory, `l` symlink, `h` hard link (to `target`), `c`/`b` device,
    /// `p` fifo.
    pub kind: char,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// BLAKE3 of a regular file's content, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

/// A node's tree: path relative to `/` → its entry.
pub type Manifest = BTreeMap<String, Item>;

/// A container made from an image and never started, removed when dropped.
pub struct Look<'a> {
    engine: &'a Engine,
    pub container: String,
}

impl<'a> Look<'a> {
    /// A look at `image` on `engine` for box `name` of `p`'s home. It carries the home's
    /// labels (the image's are a container's too) and [`names::LOOK_LABEL`]: `prune`
    /// removes one a crash left, whether or not its box still exists.
    pub fn new(p: &DockerProvider, engine: &'a Engine, name: &str, image: &str) -> Result<Self> {
        let container = format!(
            "{}-look-{}",
            names::container(name),
            agentbox_core::id::new_id()
        );
        let mut labels = names::labels(&p.home, name);
        labels.insert(names::LOOK_LABEL.to_owned(), "1".to_owned());
        engine
            .create_container(&ContainerSpec {
                name: container.clone(),
                image: image.to_owned(),
                cmd: vec!["true".into()],
                labels,
                network: Some("none".into()),
                ..Default::default()
            })
            .map_err(remote)?;
        Ok(Look { engine, container })
    }
}

impl Drop for Look<'_> {
    fn drop(&mut self) {
        let _ = self.engine.remove_container(&self.container);
    }
}

/// The manifest of node image `image` of box `rec` (read once, then kept).
pub fn of_image(
    p: &DockerProvider,
    engine: &Engine,
    rec: &BoxRecord,
    image: &str,
) -> Result<Manifest> {
    let name = rec.name.as_str();
    let file = cache_path(p, name, image);
    if let Ok(text) = fs_err::read_to_string(&file) {
        if let Ok(m) = serde_json::from_str(&text) {
            return Ok(m);
        }
    }
    let look = Look::new(p, engine, name, image)?;
    let ignore = record::ignore_set(rec);
    let manifest = engine
        .read_archive(&look.container, "/", |tar| read_tar(tar, &ignore))
        .map_err(remote)?;
    if let Some(dir) = file.parent() {
        fs_err::create_dir_all(dir)?;
    }
    // Written whole then renamed: a reader never sees half a manifest.
    let tmp = file.with_extension("tmp");
    fs_err::write(
        &tmp,
        serde_json::to_vec(&manifest).map_err(std::io::Error::other)?,
    )?;
    fs_err::rename(&tmp, &file)?;
    Ok(manifest)
}

fn cache_path(p: &DockerProvider, name: &str, image: &str) -> PathBuf {
    // An image id is `sha256:<hex>`: its hex part names the file.
    let id: String = image
        .rsplit(':')
        .next()
        .unwrap_or(image)
        .chars()
        .filter(char::is_ascii_hexdigit)
        .collect();
    BoxDirs::new(&p.home, name)
        .dir
        .join(DIR)
        .join(format!("{id}.json"))
}

/// The path of a tar entry relative to `/` (`./a/b/` → `a/b`).
fn relative(raw: &Path) -> String {
    let s = raw.to_string_lossy();
    let s = s.trim_start_matches("./").trim_start_matches('/');
    s.trim_end_matches('/').to_owned()
}

/// Read a manifest from the tar `tar` of a root, leaving out what `ignore` names and
/// [`ENGINE_MADE`].
pub fn read_tar(
    tar: &mut dyn Read,
    ignore: &agentbox_boxes::records::ignore::IgnoreSet,
) -> std::io::Result<Manifest> {
    let mut out = Manifest::new();
    let mut engine_made = Vec::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = relative(&entry.path()?);
        if ENGINE_MADE.contains(&path.as_str()) {
            engine_made.push(path);
            continue;
        }
        if path.is_empty() || path == "." || ignore.is_ignored(Path::new(&path)) {
            continue;
        }
        let h = entry.header();
        use tar::EntryType as T;
        let kind = match h.entry_type() {
            T::Regular | T::Continuous => 'f',
            T::Directory => 'd',
            T::Symlink => 'l',
            T::Link => 'h',
            T::Char => 'c',
            T::Block => 'b',
            T::Fifo => 'p',
            _ => continue,
        };
        let target = match kind {
            'l' | 'h' => entry.link_name()?.map(|t| t.to_string_lossy().into_owned()),
            _ => None,
        };
        let (mode, uid, gid, size) = (h.mode()?, h.uid()?, h.gid()?, h.size()?);
        let hash = if kind == 'f' {
            let mut hasher = blake3::Hasher::new();
            std::io::copy(&mut entry, &mut hasher)?;
            Some(hasher.finalize().to_hex().to_string())
        } else {
            None
        };
        if out.len() >= MAX_ENTRIES {
            return Err(std::io::Error::other(format!(
                "the node holds more than {MAX_ENTRIES} entries"
            )));
        }
        out.insert(
            path,
            Item {
                kind,
                mode: mode & 0o7777,
                uid,
                gid,
                size: if kind == 'f' { size } else { 0 },
                target,
                hash,
            },
        );
    }
    // A directory the engine made only to hold what it makes (`sbin` for its init, in an
    // image without one) is the engine's too.
    for made in engine_made {
        for dir in Path::new(&made).ancestors().skip(1) {
            let dir = dir.to_string_lossy().into_owned();
            if dir.is_empty() {
                break;
            }
            let prefix = format!("{dir}/");
            let holds_more = out
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&prefix));
            if !holds_more {
                out.remove(&dir);
            }
        }
    }
    Ok(out)
}

/// The changes from `a` (old) to `b` (new), sorted by path (see the module's
/// documentation).
pub fn diff(a: &Manifest, b: &Manifest) -> Vec<Change> {
    let mut paths: Vec<&String> = a.keys().chain(b.keys()).collect();
    paths.sort();
    paths.dedup();
    let size = |i: &Item| (i.kind != 'd').then_some(i.size);
    let mut out = Vec::new();
    for path in paths {
        let change = match (a.get(path), b.get(path)) {
            (Some(old), None) => Change {
                path: path.into(),
                kind: ChangeKind::Removed,
                old_size: size(old),
                new_size: None,
                detail: None,
            },
            (None, Some(new)) => Change {
                path: path.into(),
                kind: ChangeKind::Added,
                old_size: None,
                new_size: size(new),
                detail: None,
            },
            (Some(old), Some(new)) => {
                let mut details = Vec::new();
                let content = if old.kind != new.kind {
                    Some(format!("type {} -> {}", old.kind, new.kind))
                } else if old.target != new.target {
                    Some("link target".to_owned())
                } else if old.size != new.size {
                    Some(format!("size {} -> {}", old.size, new.size))
                } else if old.hash != new.hash {
                    Some("content".to_owned())
                } else {
                    None
                };
                details.extend(content.clone());
                if old.mode != new.mode {
                    details.push(format!("mode {:04o} -> {:04o}", old.mode, new.mode));
                }
                if (old.uid, old.gid) != (new.uid, new.gid) {
                    details.push(format!(
                        "owner {}:{} -> {}:{}",
                        old.uid, old.gid, new.uid, new.gid
                    ));
                }
                if details.is_empty() {
                    continue;
                }
                Change {
                    path: path.into(),
                    kind: if content.is_some() {
                        ChangeKind::Modified
                    } else {
                        ChangeKind::MetaChanged
                    },
                    old_size: size(old),
                    new_size: size(new),
                    detail: Some(details.join("; ")),
                }
            }
            (None, None) => continue,
        };
        out.push(change);
    }
    out
}

/// The unified diff of `change`, its old side read from container `old` and its new side
/// from container `new` (either `None` where the path is absent), both through the
/// engine, at most [`PATCH_LIMIT`] bytes each; `spool` holds them meanwhile.
pub fn patch(
    engine: &Engine,
    change: &Change,
    old: Option<&str>,
    new: Option<&str>,
    spool: &Path,
) -> Result<Option<String>> {
    if change.kind == ChangeKind::MetaChanged {
        return Ok(None);
    }
    let path = format!("/{}", change.path.to_string_lossy());
    let dir = tempfile::Builder::new()
        .prefix("agentbox-patch-")
        .tempdir_in(spool)?;
    // One side of the change: absent, a file read, or why its content is not compared.
    enum Side {
        Absent,
        Read(PathBuf),
        Large,
        NotAFile,
    }
    let fetch = |container: Option<&str>, side: &str| -> Result<Side> {
        let Some(c) = container else {
            return Ok(Side::Absent);
        };
        let file = dir.path().join(side);
        let mut out = fs_err::File::create(&file)?;
        Ok(
            match engine.download_file(c, &path, spool, &mut out, PATCH_LIMIT) {
                Ok(Downloaded::Whole(_)) => Side::Read(file),
                Ok(Downloaded::TooLarge) => Side::Large,
                // Not a regular file (a directory, a link): no content to compare.
                Err(_) => Side::NotAFile,
            },
        )
    };
    let file = |s: &Side| match s {
        Side::Read(f) => Some(f.clone()),
        _ => None,
    };
    Ok(match (fetch(old, "old")?, fetch(new, "new")?) {
        (Side::Large, _) | (_, Side::Large) => Some(format!(
            "large file {} differs\n",
            change.path.to_string_lossy()
        )),
        (Side::NotAFile, _) | (_, Side::NotAFile) => None,
        (o, n) => {
            agentbox_store::patch::unified(change, file(&o).as_deref(), file(&n).as_deref(), None)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: char, mode: u32, hash: Option<&str>, size: u64) -> Item {
        Item {
            kind,
            mode,
            uid: 0,
            gid: 0,
            size,
            target: None,
            hash: hash.map(str::to_owned),
        }
    }

    #[test]
    fn manifests_compare_by_kind_size_content_and_metadata_not_by_time() {
        let mut a = Manifest::new();
        a.insert("w".into(), item('d', 0o755, None, 0));
        a.insert("w/same".into(), item('f', 0o644, Some("1"), 3));
        a.insert("w/edited".into(), item('f', 0o644, Some("2"), 3));
        a.insert("w/chmod".into(), item('f', 0o644, Some("3"), 3));
        a.insert("w/gone".into(), item('f', 0o644, Some("4"), 3));
        let mut b = a.clone();
        b.insert("w/edited".into(), item('f', 0o644, Some("5"), 3));
        b.insert("w/chmod".into(), item('f', 0o755, Some("3"), 3));
        b.remove("w/gone");
        b.insert("w/new".into(), item('f', 0o644, Some("6"), 1));
        let got: Vec<(String, ChangeKind)> = diff(&a, &b)
            .into_iter()
            .map(|c| (c.path.to_string_lossy().into_owned(), c.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("w/chmod".to_owned(), ChangeKind::MetaChanged),
                ("w/edited".to_owned(), ChangeKind::Modified),
                ("w/gone".to_owned(), ChangeKind::Removed),
                ("w/new".to_owned(), ChangeKind::Added),
            ]
        );
    }

    #[test]
    fn a_tar_becomes_a_manifest_without_ignored_or_engine_made_paths() {
        let mut b = tar::Builder::new(Vec::new());
        let mut add = |path: &str, data: &[u8], kind: tar::EntryType| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, path, data).expect("append");
        };
        add("./", b"", tar::EntryType::Directory);
        add("workspace/", b"", tar::EntryType::Directory);
        add("workspace/a.txt", b"hello", tar::EntryType::Regular);
        add("etc/hostname", b"", tar::EntryType::Regular);
        add("tmp/x", b"scratch", tar::EntryType::Regular);
        add("sbin/", b"", tar::EntryType::Directory);
        add("sbin/docker-init", b"", tar::EntryType::Regular);
        add("etc/", b"", tar::EntryType::Directory);
        add("etc/passwd", b"root", tar::EntryType::Regular);
        let bytes = b.into_inner().expect("tar");
        let ignore = agentbox_boxes::records::ignore::IgnoreSet::new(&["tmp/".to_owned()]);
        let m = read_tar(&mut bytes.as_slice(), &ignore).expect("read");
        assert_eq!(
            m.keys().collect::<Vec<_>>(),
            ["etc", "etc/passwd", "workspace", "workspace/a.txt"]
        );
        assert_eq!(
            m["workspace/a.txt"].hash.as_deref(),
            Some(blake3::hash(b"hello").to_hex().as_str())
        );
        assert_eq!(m["workspace/a.txt"].size, 5);
    }
}
