//! Detached nodes for checkpoints, on every backend (tier 2): derive (cleanup without
//! touching the environment), flatten, refs keeping nodes alive through retention, removal
//! of their environment and GC, forks from them, and kills at every step of both
//! operations.
//!
//! This file holds the fixtures and the checks shared by the areas in the submodules.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use agentbox_core::id::NodeId;
use agentbox_store::fsops::scan::{scan_chain, scan_tree};

use agentbox_store::fsops::Kind;
use agentbox_store::leftovers::LeftoverKind;
use agentbox_store::node::DetachedHow;
use agentbox_store::{BackendKind, Cleanup, DetachOpts, Node, Source, Store};

use crate::common::{assert_same, commit, fixtures, snapshot_copy, whiteout, write};

/// The opaque-directory attribute of the stores these tests make (as root).
mod box_chains;
mod depth;
mod derive_flatten;
mod kills;
mod listings;

const OPAQUE: &str = "trusted.overlay.opaque";

/// A checkpoint's ref: the project key is a hash, all hex.
const CKPT: &str = "checkpoints/0123456789abcdef/warm-1";

fn set_mtime(path: &Path, sec: i64) {
    set_mtime_ns(path, (sec, 0));
}

fn set_mtime_ns(path: &Path, (sec, nsec): (i64, i64)) {
    let t = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("set mtime");
}

/// A small system-like tree: what the checkpoint cleanup removes and empties, and look-alikes
/// it must leave alone.
fn sample(root: &Path) {
    for (path, content) in [
        ("tmp/a/b.txt", "b"),
        ("tmp/c", "c"),
        ("var/tmp/x", "x"),
        ("var/log/app.log", "app log\n"),
        ("var/log/sub/deep.log", "deep\n"),
        ("var/log/dir.log/inner", "a directory named *.log stays"),
        ("var/log/keep.txt", "not a log"),
        ("var/lib/apt/lists/deb_dists_main", "lists"),
        ("var/lib/apt/extended_states", "kept"),
        ("var/cache/apt/pkgcache.bin", "bin"),
        ("var/cache/apt/archives/p.deb", "deb"),
        ("var/cache/apt/archives/lock", ""),
        ("home/u/.bash_history", "ls\nrm -rf /\n"),
        ("home/u/.npm/_logs/1-debug-0.log", "npm debug"),
        ("home/u/.npm/_cacache/index", "warm cache stays"),
        ("keep/tmp/x", "only /tmp is cleaned, not */tmp"),
        ("keep/gone", "deleted by the second commit"),
        ("keep/file", "kept"),
    ] {
        write(&root.join(path), content);
    }
    std::fs::create_dir_all(root.join("var/lib/apt/lists/partial")).expect("mkdir");
    std::fs::hard_link(
        root.join("home/u/.bash_history"),
        root.join("home/u/hist-link"),
    )
    .expect("hardlink");
    std::os::unix::fs::symlink("app.log", root.join("var/log/link.log")).expect("symlink");
    let log = root.join("var/log/app.log");
    rustix::fs::chown(
        log.as_path(),
        Some(rustix::fs::Uid::from_raw(1234)),
        Some(rustix::fs::Gid::from_raw(5678)),
    )
    .expect("chown");
    std::fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o640))
        .expect("chmod");
    xattr::set(&log, "user.k", b"v").expect("xattr");
    // Distinct, old mtimes everywhere, directories after their children.
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .contents_first(true)
        .into_iter()
        .map(|e| e.expect("walk").into_path())
        .collect();
    paths.retain(|p| !p.ends_with("link.log"));
    for (i, p) in paths.iter().enumerate() {
        set_mtime(p, 1_000_000 + 1000 * i as i64);
    }
}

/// `rel` removed from the copy `root`, its parent keeping its mtime.
fn remove_keeping_parent(root: &Path, rel: &str) {
    let path = root.join(rel);
    let parent = path.parent().expect("a parent").to_owned();
    let mtime = mtime_of(&parent);
    let md = std::fs::symlink_metadata(&path).expect("exists");
    if md.is_dir() {
        std::fs::remove_dir_all(&path).expect("rm -r");
    } else {
        std::fs::remove_file(&path).expect("rm");
    }
    set_mtime_ns(&parent, mtime);
}

/// `rel` in the copy `root` emptied, keeping its metadata.
fn empty_keeping_meta(root: &Path, rel: &str) {
    let path = root.join(rel);
    let mtime = mtime_of(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(0)
        .expect("truncate");
    set_mtime_ns(&path, mtime);
}

fn mtime_of(path: &Path) -> (i64, i64) {
    let md = std::fs::symlink_metadata(path).expect("exists");
    (md.mtime(), md.mtime_nsec())
}

/// What [`Cleanup::checkpoint`] does to the sample after the second commit of
/// [`two_commits`].
const REMOVED: [&str; 9] = [
    "tmp/a",
    "tmp/c",
    "tmp/from-commit",
    "var/tmp/x",
    "var/lib/apt/lists/deb_dists_main",
    "var/lib/apt/lists/partial",
    "var/cache/apt/pkgcache.bin",
    "var/cache/apt/archives/p.deb",
    "home/u/.npm/_logs/1-debug-0.log",
];
const EMPTIED: [&str; 4] = [
    "home/u/.bash_history",
    "home/u/hist-link",
    "var/log/app.log",
    "var/log/sub/deep.log",
];

/// An environment `name` (mounted at `dir`, or a box when `None`) made from the sample, with
/// a second commit: on `layers` the chain has two layers.
fn two_commits(store: &Store, base: &Path, name: &str, dir: Option<&Path>) -> NodeId {
    let src = base.join(format!("{name}-src"));
    sample(&src);
    store
        .create_env(name, dir, Source::Dir(src), "initial")
        .expect("create");
    let Some(dir) = dir else {
        return store.env(name).expect("env").head;
    };
    write(&dir.join("tmp/from-commit"), "c");
    write(&dir.join("var/log/app.log"), "app log, second version\n");
    std::fs::remove_file(dir.join("keep/gone")).expect("rm");
    commit(store, name, "second")
}

/// One line per entry of a merged tree: path, type, mode, owner, size, mtime, link target,
/// device, xattrs, content hash and hard-link group (directory sizes left out: they depend
/// on the filesystem, not the tree).
fn tree_lines<P: AsRef<Path>>(dirs: &[P]) -> Vec<String> {
    let refs: Vec<&Path> = dirs.iter().map(AsRef::as_ref).collect();
    let tree = scan_chain(&refs, OPAQUE).expect("scan");
    // Names of one inode visible in the tree (a link whose other names are hidden by an
    // upper layer is no link of this tree).
    let mut names: HashMap<(u64, u64), Vec<&PathBuf>> = HashMap::new();
    for (rel, e) in &tree.entries {
        if e.meta.kind == Kind::File {
            names.entry((e.meta.dev, e.meta.ino)).or_default().push(rel);
        }
    }
    let mut out = Vec::new();
    for (rel, e) in &tree.entries {
        let m = &e.meta;
        let size = if m.kind == Kind::Dir { 0 } else { m.size };
        let mut line = format!(
            "{} {:?} {:o} {}:{} {} {}.{} {:?} {}",
            rel.display(),
            m.kind,
            m.perm,
            m.uid,
            m.gid,
            size,
            m.mtime_sec,
            m.mtime_nsec,
            m.target,
            m.rdev
        );
        for (k, v) in &m.xattrs {
            line.push_str(&format!(" {k}={v:?}"));
        }
        if m.kind == Kind::File {
            let group = &names[&(m.dev, m.ino)];
            if group.len() > 1 {
                line.push_str(&format!(" link:{}", group[0].display()));
            }
            let content = std::fs::read(&e.src).expect("read");
            line.push_str(&format!(" {}", blake3::hash(&content).to_hex()));
        }
        out.push(line);
    }
    out
}

/// A digest of [`tree_lines`].
fn digest<P: AsRef<Path>>(dirs: &[P]) -> String {
    blake3::hash(tree_lines(dirs).join("\n").as_bytes())
        .to_hex()
        .to_string()
}

fn node_digest(store: &Store, node: &Node) -> String {
    digest(&store.chain_dirs(node).expect("chain"))
}

/// Layer ids with data in the store.
fn layers_on_disk(store: &Store) -> BTreeSet<String> {
    std::fs::read_dir(store.root().join("layers"))
        .expect("layers")
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_type().expect("type").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Layers the chains of the live nodes use.
fn layers_in_use(store: &Store) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for node in store.nodes().expect("nodes").values() {
        out.extend(store.chain(node).expect("chain").into_iter().map(|l| l.id));
    }
    out
}

fn assert_clean(store: &Store, what: &str) {
    let report = store.fsck(false).expect("fsck");
    assert!(report.leftovers_checked, "{what}");
    assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
    assert_eq!(
        layers_on_disk(store),
        layers_in_use(store),
        "{what}: every layer on disk is in use, and no more"
    );
}

fn is_whiteout(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
}

/// A `layers` store in a temporary home whose chains flatten at the smallest depth the
/// backend allows (2: a create and one commit reach it).
fn shallow_layers_store() -> (agentbox_testkit::TempHome, Store) {
    layers_store_of_depth(2)
}

/// A `layers` store in a temporary home whose chains are at most `depth` layers deep.
fn layers_store_of_depth(depth: u32) -> (agentbox_testkit::TempHome, Store) {
    let home = agentbox_testkit::TempHome::new();
    let root = home.path().join("store");
    Store::init(&root, Some(BackendKind::Layers)).expect("init");
    let config = root.join("store.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).expect("read")).expect("json");
    json["max_depth"] = depth.into();
    std::fs::write(&config, serde_json::to_vec(&json).expect("json")).expect("write");
    let store = Store::open(&root).expect("open");
    (home, store)
}
