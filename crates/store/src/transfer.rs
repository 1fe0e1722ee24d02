//! Export and import of environments as bundles (format: `docs/bundle-format.md`).
//!
//! One file (over 600 lines): export and import are the two directions of one mapping
//! between nodes and bundle records, and are changed together.
//!
//! Export walks nodes parents-first and writes each as the difference from its parent, so a
//! history of ten snapshots stores the first tree once and then only changes. Import stages
//! everything under `store/tmp/` first and only then creates layers, nodes and the
//! environment; any error removes the staging area, so a bad archive leaves nothing behind.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use agentbox_core::atomic::write_json_unsynced;
use agentbox_core::failpoint;
use agentbox_core::id::{new_id, NodeId};
use agentbox_core::lock::Mode;
use chrono::Utc;
use serde::Serialize;

use crate::bundle::{
    self, BundleKind, BundleWriter, Compression, ImportOpts, Imported, Manifest, ManifestNode,
};
use crate::node::Node;
use crate::store::{EnvState, Source, Store};
use crate::{Error, Result};

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub kind: BundleKind,
    /// The environment exported.
    pub env: String,
    pub compression: Compression,
    pub nodes: usize,
    pub output: PathBuf,
}

/// What an import created.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub kind: BundleKind,
    pub env: String,
    pub head: NodeId,
    pub nodes: usize,
    pub reused_nodes: usize,
    /// Files whose setuid/setgid bits or file capabilities were stripped (0 with
    /// [`ImportOptions::allow_setuid`]).
    pub stripped_setuid: u64,
    /// Overlayfs-private xattrs in the archive that were not applied (always dropped).
    pub dropped_overlay_xattrs: u64,
    /// Other `trusted.*`/`security.*` xattrs in the archive that were not applied (always
    /// dropped, see [`bundle::Imported::dropped_privileged_xattrs`]).
    pub dropped_privileged_xattrs: u64,
}

/// Choices of [`import`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Create device nodes found in the bundle.
    pub allow_devices: bool,
    /// Keep setuid/setgid bits and `security.capability` xattrs (stripped otherwise).
    pub allow_setuid: bool,
    /// Decompressed-size limit in bytes; `None`: [`bundle::default_max_size`].
    pub max_size: Option<u64>,
}

/// Entries handed from the thread that reads a tree to the one that writes it, at a time:
/// one channel operation per batch instead of per entry.
const WALK_BATCH: usize = 256;
/// Batches the reading thread may be ahead of the writing one.
const WALK_AHEAD: usize = 16;

/// Write the complete layer of `node` while its tree is read: one thread walks the tree
/// ([`Store::walk_node_tree`]) and hands its entries over in order; this one plans and writes
/// each ([`BundleWriter::write_tree_entries`]). The walk costs as much as reading the
/// metadata of every entry; this way it overlaps with reading, hashing and compressing the
/// content instead of coming before it.
fn write_tree_streamed<W: Write>(
    store: &Store,
    node: &Node,
    w: &mut BundleWriter<W>,
) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<crate::fsops::Entry>>>(WALK_AHEAD);
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut batch = Vec::with_capacity(WALK_BATCH);
            let walked = store.walk_node_tree(node, &mut |e| {
                batch.push(e);
                if batch.len() == WALK_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(WALK_BATCH));
                    // A closed channel: the writer stopped (its error is the one reported).
                    tx.send(Ok(full)).map_err(|_| Error::Bundle {
                        path: PathBuf::from("<output>"),
                        message: "the export stopped".into(),
                    })?;
                }
                Ok(())
            });
            // The writer may have stopped already; then nobody needs the rest.
            let _ = tx.send(walked.map(|()| batch));
        });
        let entries = rx.into_iter().flat_map(
            |batch| -> Box<dyn Iterator<Item = Result<crate::fsops::Entry>>> {
                match batch {
                    Ok(v) => Box::new(v.into_iter().map(Ok)),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            },
        );
        w.write_tree_entries(&node.id, entries)
    })
}

fn manifest_node(n: &Node, base: Option<String>) -> ManifestNode {
    ManifestNode {
        id: n.id.as_str().to_owned(),
        parent: n.parent.as_deref().map(str::to_owned),
        seq: n.seq,
        message: n.message.clone(),
        command: n.command.clone(),
        created: n.created,
        metadata: n.metadata.clone(),
        base,
        entries: None,
        checksum: None,
    }
}

/// Write a bundle of `env` (history: every node; snapshot / rootfs: the node `reference`).
pub fn export(
    store: &Store,
    env: &str,
    reference: &str,
    kind: BundleKind,
    compression: Compression,
    output: &Path,
) -> Result<ExportReport> {
    let state = store.env(env)?;
    let target = store.node(&store.resolve(env, reference)?)?;
    // Write to a temporary name next to the output; rename when complete.
    let to_stdout = output == Path::new("-");
    let tmp = output.with_file_name(format!(
        ".{}.partial-{}",
        output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    // Counted for the progress the CLI prints (see `agentbox_core::progress`).
    let sink: Box<dyn Write> = if to_stdout {
        Box::new(agentbox_core::progress::Counting(std::io::stdout().lock()))
    } else {
        Box::new(BufWriter::with_capacity(
            1 << 20,
            agentbox_core::progress::Counting(fs_err::File::create(&tmp)?),
        ))
    };
    let result = (|| -> Result<usize> {
        let mut w = BundleWriter::new(sink, kind, compression)?;
        let count = match kind {
            BundleKind::Rootfs => {
                w.write_rootfs(&store.node_tree(&target)?)?;
                1
            }
            BundleKind::Snapshot => {
                let mut timer = agentbox_core::timing::Timer::start("export");
                let mut node = target.clone();
                node.parent = None;
                let mut m = Manifest::new(kind, env, &target.id);
                m.nodes.push(manifest_node(&node, None));
                w.write_manifest(&m)?;
                write_tree_streamed(store, &target, &mut w)?;
                timer.lap("walk and write");
                1
            }
            BundleKind::History => {
                let h = store.history(env)?;
                // Parents first: sort by depth from a root.
                let by_id: BTreeMap<&str, &Node> =
                    h.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
                let depth = |n: &Node| {
                    let mut d = 0;
                    let mut p = n.parent.as_deref();
                    while let Some(id) = p {
                        d += 1;
                        p = by_id.get(id).and_then(|n| n.parent.as_deref());
                    }
                    d
                };
                let mut order: Vec<&Node> = h.nodes.iter().collect();
                order.sort_by_key(|n| (depth(n), n.created));
                // Each node as the difference from its parent (complete for a root). Each
                // tree is read once: kept (parents come first) until its last child used it.
                let mut children_left: BTreeMap<&str, usize> = BTreeMap::new();
                for n in &order {
                    if let Some(p) = n.parent.as_deref().filter(|p| by_id.contains_key(p)) {
                        *children_left.entry(p).or_default() += 1;
                    }
                }
                let mut m = Manifest::new(kind, env, &state.head);
                m.tags = state.tags.clone();
                m.nodes = order
                    .iter()
                    .map(|n| {
                        let base = n
                            .parent
                            .as_deref()
                            .filter(|p| by_id.contains_key(p))
                            .map(str::to_owned);
                        manifest_node(n, base)
                    })
                    .collect();
                w.write_manifest(&m)?;
                // Each layer is planned and written in turn (its count and checksum go into
                // end.json), so one layer's plan is in memory at a time.
                let mut trees: BTreeMap<&str, crate::fsops::Tree> = BTreeMap::new();
                for n in &order {
                    let parent = n.parent.as_deref().and_then(|p| by_id.get(p));
                    let tree = store.node_tree(n)?;
                    let layer = match parent {
                        Some(p) => {
                            let pid = p.id.as_str();
                            let base = match trees.get(pid) {
                                Some(t) => bundle::layer_from_trees(Some(t), &tree)?,
                                None => {
                                    bundle::layer_from_trees(Some(&store.node_tree(p)?), &tree)?
                                }
                            };
                            let left = children_left.entry(pid).or_default();
                            *left = left.saturating_sub(1);
                            if *left == 0 {
                                trees.remove(pid);
                            }
                            base
                        }
                        None => bundle::layer_from_trees(None, &tree)?,
                    };
                    if children_left.get(n.id.as_str()).is_some_and(|c| *c > 0) {
                        trees.insert(n.id.as_str(), tree);
                    }
                    w.write_layer(&n.id, &layer)?;
                }
                order.len()
            }
        };
        let mut sink = w.finish()?;
        sink.flush()?;
        Ok(count)
    })();
    match result {
        Ok(nodes) => {
            if !to_stdout {
                // No fsync: a bundle is not store state, and one cut short by a crash is
                // detected on import (checksums, missing end record) rather than trusted.
                fs_err::rename(&tmp, output)?;
            }
            Ok(ExportReport {
                kind,
                env: env.to_owned(),
                compression,
                nodes,
                output: output.to_owned(),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// A fresh staging directory path inside the store (not created; its parent is), which
/// [`Source::Staged`](crate::Source::Staged) can adopt without copying.
pub fn staging(store: &Store, what: &str) -> Result<PathBuf> {
    let dir = store.layout().tmp().join(format!("{what}-{}", new_id()));
    fs_err::create_dir_all(store.layout().tmp())?;
    Ok(dir)
}

/// Local path of `src`, downloading an http(s) URL into `dir` first.
fn fetch(src: &str, dir: &Path) -> Result<PathBuf> {
    if !(src.starts_with("http://") || src.starts_with("https://")) {
        return Ok(PathBuf::from(src));
    }
    fs_err::create_dir_all(dir)?;
    let path = dir.join("download");
    let mut resp = ureq::get(src).call().map_err(|e| Error::Bundle {
        path: PathBuf::from(src),
        message: format!("download failed: {e}"),
    })?;
    let mut file = BufWriter::new(fs_err::File::create(&path)?);
    std::io::copy(&mut resp.body_mut().as_reader(), &mut file).map_err(|e| {
        if crate::error::io_is_no_space(&e) {
            Error::NoSpace {
                path: path.clone(),
                detail: format!("downloading {src}: {e}"),
            }
        } else {
            Error::Bundle {
                path: PathBuf::from(src),
                message: format!("download interrupted: {e}"),
            }
        }
    })?;
    file.flush()
        .map_err(|e| Error::from(e).or_no_space(&path))?;
    Ok(path)
}

/// Stage a rootfs tarball (file or URL) as a complete tree for a new environment.
pub fn stage_rootfs(store: &Store, src: &str) -> Result<PathBuf> {
    let dir = staging(store, "rootfs")?;
    let result = (|| {
        let file = fetch(src, &dir.join("dl"))?;
        let opts = ImportOpts {
            same_owner: rustix::process::geteuid().is_root(),
            make_layer_dir: store.backend().staging_dir_maker(),
            // A base image is the user's choice, as with `docker import` (its `sudo` and
            // `ping` keep their bits); box processes run with no_new_privs regardless.
            allow_setuid: true,
            ..ImportOpts::default()
        };
        let imported = bundle::import(&file, &dir.join("x"), &opts)?;
        if imported.kind != BundleKind::Rootfs {
            return Err(Error::Bundle {
                path: file,
                message: format!(
                    "this is an agentbox {} bundle, not a rootfs tarball; use `agentbox import`",
                    imported.kind
                ),
            });
        }
        let layer = only_tree(imported.layers, &file)?;
        let out = dir.with_extension("tree");
        fs_err::rename(&layer, &out)?;
        Ok(out)
    })();
    let _ = store.backend().remove_tree(&dir);
    result
}

/// The staged tree of a rootfs import (its only layer).
fn only_tree(layers: Vec<(String, PathBuf)>, file: &Path) -> Result<PathBuf> {
    match layers.into_iter().next() {
        Some((_, dir)) => Ok(dir),
        None => Err(Error::Bundle {
            path: file.to_owned(),
            message: "the archive holds no tree".into(),
        }),
    }
}

/// Create environment `name` at `dir` from a bundle or rootfs tarball.
///
/// Invariant: on any error nothing of the import remains — not the staging area, not a
/// layer, layer record or node it wrote, not the environment, and not `dir` if the import
/// created it (and it is still empty). A full disk anywhere is [`Error::NoSpace`].
pub fn import(
    store: &Store,
    src: &str,
    name: &str,
    dir: &Path,
    options: ImportOptions,
) -> Result<ImportReport> {
    store.check_new_env_name(name)?;
    if store.env(name).is_ok() {
        return Err(Error::EnvExists { name: name.into() });
    }
    let dir_existed = dir.exists();
    let stage = staging(store, "import")?;
    let mut timer = agentbox_core::timing::Timer::start("import");
    let result = (|| -> Result<ImportReport> {
        let file = fetch(src, &stage.join("dl"))?;
        timer.lap("fetch");
        let opts = ImportOpts {
            allow_devices: options.allow_devices,
            allow_setuid: options.allow_setuid,
            // Owners are restored where the kernel allows it (root); otherwise files belong
            // to the importing user.
            same_owner: rustix::process::geteuid().is_root(),
            make_layer_dir: store.backend().staging_dir_maker(),
            max_size: options.max_size,
        };
        // A node the store holds already is kept as it is (see `import_history_locked`):
        // its layer is checked, not written.
        let mut imported =
            bundle::import_into(&file, &stage.join("x"), &opts, &|id| store.node(id).is_ok())?;
        timer.lap("extract");
        failpoint::hit("import:after-stage");
        let (stripped_setuid, dropped_overlay_xattrs, dropped_privileged_xattrs) = (
            imported.stripped_setuid,
            imported.dropped_overlay_xattrs,
            imported.dropped_privileged_xattrs,
        );
        let mut report = match imported.manifest.take() {
            None => {
                let layer = only_tree(imported.layers, &file)?;
                let state = store.create_env(
                    name,
                    Some(dir),
                    Source::Staged(layer),
                    &format!("imported from {src}"),
                )?;
                ImportReport {
                    kind: imported.kind,
                    env: name.to_owned(),
                    head: state.head,
                    nodes: 1,
                    reused_nodes: 0,
                    stripped_setuid: 0,
                    dropped_overlay_xattrs: 0,
                    dropped_privileged_xattrs: 0,
                }
            }
            Some(manifest) => import_history(store, &manifest, &imported, name, dir)?,
        };
        report.stripped_setuid = stripped_setuid;
        report.dropped_overlay_xattrs = dropped_overlay_xattrs;
        report.dropped_privileged_xattrs = dropped_privileged_xattrs;
        timer.lap("store");
        Ok(report)
    })();
    let _ = store.backend().remove_tree(&stage);
    timer.lap("cleanup");
    if result.is_err() && !dir_existed {
        // Only an empty directory goes: `remove_dir` refuses anything else.
        let _ = std::fs::remove_dir(dir);
    }
    result.map_err(|e| e.or_no_space(store.root()))
}

/// What [`import_history`] has written so far, to take back if it fails.
#[derive(Default)]
struct Written {
    nodes: Vec<String>,
    layers: Vec<String>,
}

impl Written {
    /// Remove what this import wrote (store lock held). Only nodes this import created
    /// are removed, and only while no environment names them: they have no history
    /// anywhere else yet. Best effort: whatever stays is garbage `gc` and `prune` free.
    fn undo(&self, store: &Store) {
        let named: std::collections::BTreeSet<String> = store
            .envs()
            .map(|envs| {
                envs.into_iter()
                    .flat_map(|e| std::iter::once(e.head.into_string()).chain(e.tags.into_values()))
                    .collect()
            })
            .unwrap_or_default();
        for id in self.nodes.iter().rev() {
            if !named.contains(id) {
                let _ = store.remove_node_file(id);
            }
        }
        for lid in self.layers.iter().rev() {
            let _ = std::fs::remove_file(store.layout().layer_record(lid));
            let _ = store.backend().remove_layer(lid);
        }
    }
}

/// Record the nodes of `manifest` that `imported` (its unpacking, manifest taken out) staged,
/// reuse those the store holds, and create environment `name` at `dir` on its head.
fn import_history(
    store: &Store,
    manifest: &Manifest,
    imported: &Imported,
    name: &str,
    dir: &Path,
) -> Result<ImportReport> {
    let _lock = store.lock_store(Mode::Shared, "import")?;
    let mut written = Written::default();
    let result = import_history_locked(store, manifest, imported, name, dir, &mut written);
    if result.is_err() {
        written.undo(store);
    }
    result
}

fn import_history_locked(
    store: &Store,
    manifest: &Manifest,
    imported: &Imported,
    name: &str,
    dir: &Path,
    written: &mut Written,
) -> Result<ImportReport> {
    let staged: BTreeMap<&str, &PathBuf> = imported
        .layers
        .iter()
        .map(|(id, dir)| (id.as_str(), dir))
        .collect();
    let mut created = 0;
    let mut reused = 0;
    let mut index_entries: Vec<PathBuf> = Vec::new();
    let mut layer_of: BTreeMap<String, String> = BTreeMap::new();
    let max_seq = manifest.nodes.iter().map(|n| n.seq).max().unwrap_or(0);
    for mn in &manifest.nodes {
        if let Ok(existing) = store.node(&mn.id) {
            layer_of.insert(mn.id.clone(), existing.layer.clone());
            reused += 1;
            continue;
        }
        let layer_dir = match staged.get(mn.id.as_str()) {
            Some(d) => d,
            // Held when the unpacking began, gone now (a `gc` or `prune` in between): its
            // data was not written, so the import cannot go on.
            None if imported.held.contains(&mn.id) => {
                return Err(Error::Refused {
                    action: "import",
                    id: mn.id.clone(),
                    reason: "it was in the store when this import began and was removed while \
                             it ran; run the import again"
                        .into(),
                })
            }
            None => {
                return Err(Error::Bundle {
                    path: PathBuf::from(&mn.id),
                    message: "node listed in the manifest has no data".into(),
                })
            }
        };
        let lid = new_id();
        // Recorded before the backend starts: a failure half-way leaves `.tmp-` data the
        // backend removes, or a published layer this import takes back.
        written.layers.push(lid.clone());
        let record = match &mn.base {
            None => {
                // A complete tree: drop any marker files a complete layer cannot need.
                store.backend().layer_from_staged(layer_dir, &lid)?
            }
            Some(base) => {
                let base_node = store.node(base)?;
                let chain = store.chain(&base_node)?;
                store
                    .backend()
                    .layer_from_oci_diff(layer_dir, &chain, &lid)?
            }
        };
        write_json_unsynced(&store.layout().layer_record(&lid), &record)?;
        let node = Node {
            id: NodeId::from_trusted(mn.id.as_str()),
            parent: mn
                .parent
                .clone()
                .filter(|p| manifest.nodes.iter().any(|m| m.id == *p) || store.node(p).is_ok())
                .map(NodeId::from_trusted),
            env: name.to_owned(),
            seq: mn.seq,
            layer: lid.clone(),
            message: mn.message.clone(),
            command: mn.command.clone(),
            created: mn.created,
            metadata: mn.metadata.clone(),
            deleted: None,
            detached: None,
        };
        written.nodes.push(node.id.as_str().to_owned());
        // The id's index entry before the node file (see `index`).
        if let Some(entry) = store.index_id(&node.id)? {
            index_entries.push(entry);
        }
        write_json_unsynced(&store.layout().node(&node.id), &node)?;
        layer_of.insert(mn.id.clone(), lid);
        created += 1;
    }
    // Every imported layer and node is durable before the environment names them.
    let mut files: Vec<PathBuf> = manifest
        .nodes
        .iter()
        .map(|n| store.layout().node(&n.id))
        .collect();
    files.extend(index_entries);
    store.backend().make_durable(&files)?;
    failpoint::hit("import:after-nodes");
    // The environment is the commit point of the import.
    let env_dir = store.claim_env_dir(name)?;
    fs_err::create_dir_all(dir)?;
    let state = EnvState {
        name: name.to_owned(),
        // As old as its oldest node: the environment's history is its nodes made since.
        created: manifest
            .nodes
            .iter()
            .map(|n| n.created)
            .min()
            .unwrap_or_else(Utc::now),
        mountpoint: Some(fs_err::canonicalize(dir)?),
        head: NodeId::from_trusted(manifest.head.as_str()),
        next_seq: max_seq + 1,
        // The branch tips of what this import made (nodes already in the store keep the
        // environment that made them).
        tips: {
            let made: std::collections::BTreeSet<&str> =
                written.nodes.iter().map(String::as_str).collect();
            let parents: std::collections::BTreeSet<&str> = manifest
                .nodes
                .iter()
                .filter(|n| made.contains(n.id.as_str()))
                .filter_map(|n| n.parent.as_deref())
                .collect();
            made.iter()
                .filter(|id| !parents.contains(*id))
                .map(|id| (*id).to_owned())
                .collect()
        },
        tags: manifest.tags.clone(),
        checkout_pending: None,
        box_base: None,
        disk_limit: None,
        held_by: None,
    };
    let head = store.node(&state.head)?;
    let result = (|| {
        store
            .backend()
            .reset_work(&store.work_dirs(&state), &store.chain(&head)?)?;
        store.write_env(&state)
    })();
    if let Err(e) = result {
        let _ = fs_err::remove_dir_all(&env_dir);
        return Err(e);
    }
    Ok(ImportReport {
        kind: imported.kind,
        env: name.to_owned(),
        head: state.head,
        nodes: created + reused,
        reused_nodes: reused,
        stripped_setuid: 0,
        dropped_overlay_xattrs: 0,
        dropped_privileged_xattrs: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;

    /// A node the store held while the bundle was unpacked (so its layer was not written)
    /// and that is gone by the time the import takes the store's lock: the import stops with
    /// an error that says so, and leaves no environment behind.
    #[test]
    fn a_held_node_removed_during_the_import_stops_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = Store::open_or_init(&tmp.path().join("store"), Some(BackendKind::Layers))
            .expect("store");
        let mut manifest = Manifest::new(BundleKind::History, "e", "0123456789abcdef");
        manifest.nodes.push(ManifestNode {
            id: "0123456789abcdef".to_owned(),
            parent: None,
            seq: 1,
            message: "gone".to_owned(),
            command: None,
            created: Utc::now(),
            metadata: BTreeMap::new(),
            base: None,
            entries: None,
            checksum: None,
        });
        let imported = Imported {
            kind: BundleKind::History,
            manifest: None,
            layers: Vec::new(),
            stripped_setuid: 0,
            dropped_overlay_xattrs: 0,
            dropped_privileged_xattrs: 0,
            held: vec!["0123456789abcdef".to_owned()],
        };
        let dir = tmp.path().join("copy");
        let err = import_history(&store, &manifest, &imported, "c", &dir)
            .expect_err("the node's data was never written");
        let msg = err.to_string();
        assert!(
            matches!(err, Error::Refused { .. }) && msg.contains("removed while it ran"),
            "{msg}"
        );
        assert!(store.env("c").is_err(), "no environment is left");
        assert!(!dir.exists(), "the directory was not created");
    }
}
