//! Detached nodes for checkpoints, on every backend (tier 2): derive (cleanup without
//! touching the environment), flatten, refs keeping nodes alive through retention, removal
//! of their environment and GC, forks from them, and kills at every step of both
//! operations.

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

#[test]
fn derive_edits_exactly_the_matches_and_leaves_the_environment_alone() {
    for fx in fixtures("derive_edits_exactly_the_matches_and_leaves_the_environment_alone") {
        let store = fx.store();
        let dir = fx.dir("ck");
        let head = two_commits(&store, &fx.base, "ck", Some(&dir));
        let head_copy = fx.base.join("ck-head");
        snapshot_copy(&dir, &head_copy);
        // The running box's work since, never committed.
        write(&dir.join("tmp/uncommitted"), "u");
        write(&dir.join("var/log/app.log"), "busy\n");
        let env_json = std::fs::read(store.root().join("envs/ck/env.json")).expect("env.json");
        let work = fx.base.join("ck-work");
        snapshot_copy(&dir, &work);

        let derived = store
            .derive(
                "ck",
                "HEAD",
                &Cleanup::checkpoint(),
                DetachOpts::new(CKPT, "warm"),
            )
            .expect("derive");
        let kind = fx.kind;

        // The environment has not moved: state file, HEAD and working tree byte for byte.
        assert_eq!(
            std::fs::read(store.root().join("envs/ck/env.json")).expect("env.json"),
            env_json,
            "{kind:?}"
        );
        assert_eq!(store.env("ck").expect("env").head, head);
        assert_same(&work, &dir, &format!("{kind:?} working tree after derive"));

        // A detached node, named by the ref, in nobody's history.
        let node = &derived.node;
        assert_eq!(
            store.get_ref(CKPT).expect("ref").as_deref(),
            Some(node.id.as_str())
        );
        assert_eq!(node.parent, None);
        let detached = node.detached.as_ref().expect("detached");
        assert_eq!(
            (detached.from.as_str(), detached.how),
            (head.as_str(), DetachedHow::Derive)
        );
        assert!(store
            .history("ck")
            .expect("history")
            .nodes
            .iter()
            .all(|n| n.id != node.id));
        assert_eq!(
            (derived.deleted, derived.truncated),
            (REMOVED.len(), EMPTIED.len()),
            "{kind:?}"
        );

        // Its tree is HEAD's with exactly those edits.
        let expected = fx.base.join("ck-expected");
        snapshot_copy(&head_copy, &expected);
        for rel in REMOVED {
            remove_keeping_parent(&expected, rel);
        }
        for rel in EMPTIED {
            empty_keeping_meta(&expected, rel);
        }
        let d2 = fx.dir("ck-warm");
        let forked = store
            .fork_node(CKPT, "ck-warm", Some(&d2))
            .expect("fork the checkpoint");
        assert_eq!(forked.head, node.id);
        assert_same(&expected, &d2, &format!("{kind:?} derived tree"));
        assert_eq!(digest(&[&d2]), node_digest(&store, node));
        let history: Vec<NodeId> = store
            .history("ck-warm")
            .expect("history")
            .nodes
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert_eq!(
            history,
            std::slice::from_ref(&node.id),
            "the fork's history starts there"
        );

        // Storage: one small layer on top of HEAD's chain, or one subvolume.
        let chain = store.chain(node).expect("chain");
        let head_chain = store
            .chain(&store.node(&head).expect("head"))
            .expect("chain");
        match kind {
            BackendKind::Layers => {
                assert_eq!(chain[1..], head_chain[..]);
                let top = store.backend().layer_dir(&chain[0].id);
                assert!(is_whiteout(&top.join("tmp/a")));
                assert!(is_whiteout(&top.join("home/u/.npm/_logs/1-debug-0.log")));
                let files: usize = scan_tree(&top)
                    .expect("scan")
                    .entries
                    .values()
                    .filter(|e| e.meta.kind == Kind::File)
                    .inspect(|e| assert_eq!(e.meta.size, 0, "{}", e.rel.display()))
                    .count();
                assert_eq!(files, EMPTIED.len(), "only the emptied files");
            }
            BackendKind::Btrfs => {
                assert_eq!(chain.len(), 1);
                assert_ne!(chain[0].id, head_chain[0].id);
            }
        }

        // The fork works on top of it; the source environment still commits.
        write(&d2.join("after"), "a");
        commit(&store, "ck-warm", "after");
        store.checkout("ck-warm", &node.id).expect("checkout");
        assert_same(&expected, &d2, &format!("{kind:?} back to the checkpoint"));
        commit(&store, "ck", "the box goes on");
        assert_same(
            &work,
            &dir,
            &format!("{kind:?} working tree after a commit"),
        );
        assert_clean(&store, &format!("{kind:?}"));

        // Nothing to clean: the node shares its source's layer.
        let again = store
            .derive(
                "ck-warm",
                &node.id,
                &Cleanup::checkpoint(),
                DetachOpts::new("checkpoints/0123456789abcdef/warm-2", "again"),
            )
            .expect("derive again");
        assert_eq!((again.deleted, again.truncated), (0, 0));
        assert_eq!(again.node.layer, node.layer);
        store.remove_env("ck-warm").expect("remove");
        store.remove_env("ck").expect("remove");
    }
}

#[test]
fn flatten_makes_one_self_contained_layer() {
    for fx in fixtures("flatten_makes_one_self_contained_layer") {
        let store = fx.store();
        let kind = fx.kind;
        let dir = fx.dir("fl");
        two_commits(&store, &fx.base, "fl", Some(&dir));
        // A deeper chain: a directory replaced (opaque on `layers`), a new hard link.
        std::fs::remove_dir_all(dir.join("var/log/sub")).expect("rm");
        write(&dir.join("var/log/sub/new.txt"), "new");
        std::fs::hard_link(dir.join("keep/file"), dir.join("keep/file-link")).expect("link");
        commit(&store, "fl", "third");
        let derived = store
            .derive(
                "fl",
                "HEAD",
                &Cleanup::checkpoint(),
                DetachOpts::new(CKPT, "warm"),
            )
            .expect("derive")
            .node;
        let want = node_digest(&store, &derived);
        let derived_chain = store.chain(&derived).expect("chain");

        // The ref moves from the derived node to the flattened one.
        let flat = store
            .flatten("fl", CKPT, DetachOpts::new(CKPT, "warm, flattened"))
            .expect("flatten");
        assert_eq!(
            store.get_ref(CKPT).expect("ref").as_deref(),
            Some(flat.id.as_str())
        );
        let detached = flat.detached.as_ref().expect("detached");
        assert_eq!(detached.from, derived.id);
        assert_eq!(detached.how, DetachedHow::Flatten);
        let chain = store.chain(&flat).expect("chain");
        assert_eq!(chain.len(), 1, "{kind:?}");
        assert_eq!(chain[0].parent, None);
        assert_eq!(node_digest(&store, &flat), want, "{kind:?}: same tree");
        match kind {
            BackendKind::Layers => {
                assert!(derived_chain.len() >= 3);
                assert!(derived_chain.iter().all(|l| l.id != flat.layer));
                // A plain tree: no overlay markers left.
                let raw = scan_tree(&store.backend().layer_dir(&flat.layer)).expect("scan");
                assert!(raw.entries.values().all(|e| !e.meta.is_whiteout()
                    && !e.meta.xattrs.keys().any(|k| k.contains("overlay."))));
            }
            BackendKind::Btrfs => assert_eq!(flat.layer, derived.layer, "no copy on btrfs"),
        }

        // The sources go: the environment with its history, the derived node (its ref
        // moved). Only the flattened node's storage is left, and it still checks out.
        store.remove_env("fl").expect("remove");
        let report = store.gc().expect("gc");
        assert!(
            report.removed_nodes.iter().any(|n| *n == derived.id),
            "{report:?}"
        );
        assert_eq!(
            store
                .nodes()
                .expect("nodes")
                .into_keys()
                .collect::<Vec<_>>(),
            std::slice::from_ref(&flat.id)
        );
        assert_eq!(layers_on_disk(&store), BTreeSet::from([flat.layer.clone()]));
        assert_clean(&store, &format!("{kind:?}"));
        let d2 = fx.dir("fl-again");
        store.fork_node(CKPT, "fl-again", Some(&d2)).expect("fork");
        assert_eq!(digest(&[&d2]), want, "{kind:?}: checked out");
        assert!(
            std::fs::symlink_metadata(d2.join("keep/file-link"))
                .expect("link")
                .nlink()
                == 2
        );
        store.remove_env("fl-again").expect("remove");
    }
}

#[test]
fn refs_keep_nodes_through_retention_env_removal_and_gc() {
    for fx in fixtures("refs_keep_nodes_through_retention_env_removal_and_gc") {
        let store = fx.store();
        let kind = fx.kind;
        let dir = fx.dir("src");
        two_commits(&store, &fx.base, "src", Some(&dir));
        let mut ids = vec![store.env("src").expect("env").head];
        for i in 0..6 {
            write(&dir.join(format!("f{i}")), &i.to_string());
            ids.push(commit(&store, "src", &format!("c{i}")));
        }
        // Another environment shares the start of the history.
        let d_other = fx.dir("other");
        store
            .fork_env("src", &ids[1], "other", Some(&d_other))
            .expect("fork");
        let derived = store
            .derive(
                "src",
                &ids[3],
                &Cleanup::checkpoint(),
                DetachOpts::new(CKPT, "warm"),
            )
            .expect("derive")
            .node;
        let want = node_digest(&store, &derived);
        // A plain ref to a node of the history keeps it too.
        store.set_ref("keep/mid", Some(&ids[2])).expect("ref");
        let mid_digest = node_digest(&store, &store.node(&ids[2]).expect("node"));

        let retained = store.retain("src", 0).expect("retain");
        assert!(
            !retained.dropped.iter().any(|n| *n == ids[2]),
            "{retained:?}"
        );
        store.remove_env("src").expect("remove the source");
        store.gc().expect("gc");
        for id in [&derived.id, &ids[2]] {
            let node = store.node(id).expect("kept");
            for layer in store.chain(&node).expect("chain") {
                assert!(store.backend().layer_dir(&layer.id).is_dir(), "{kind:?}");
            }
        }
        assert_eq!(node_digest(&store, &derived), want, "{kind:?}");
        assert_eq!(
            node_digest(&store, &store.node(&ids[2]).expect("node")),
            mid_digest
        );
        assert_clean(&store, &format!("{kind:?} refs kept"));
        let d2 = fx.dir("revived");
        store.fork_node(CKPT, "revived", Some(&d2)).expect("fork");
        assert_eq!(digest(&[&d2]), want);
        store.remove_env("revived").expect("remove");

        // The refs go: GC frees exactly what nothing else uses.
        let before: BTreeSet<String> = layers_on_disk(&store);
        store.set_ref(CKPT, None).expect("unref");
        store.set_ref("keep/mid", None).expect("unref");
        let report = store.gc().expect("gc");
        assert!(
            report.removed_nodes.iter().any(|n| *n == derived.id),
            "{report:?}"
        );
        // Left: the other environment's history (on btrfs each node has its own layer).
        let mut other_layers = BTreeSet::new();
        for node in store.history("other").expect("history").nodes {
            other_layers.extend(store.chain(&node).expect("chain").into_iter().map(|l| l.id));
        }
        assert!(other_layers.contains(&store.node(&ids[1]).expect("kept").layer));
        assert_eq!(layers_on_disk(&store), other_layers, "{kind:?}");
        let freed: BTreeSet<String> = before.difference(&other_layers).cloned().collect();
        let removed: BTreeSet<String> = report.removed_layers.into_iter().collect();
        assert_eq!(removed, freed, "{kind:?}");
        assert!(removed.contains(&derived.layer));
        assert_clean(&store, &format!("{kind:?} refs dropped"));
        store.remove_env("other").expect("remove");
    }
}

#[test]
fn a_box_derive_records_removals_as_whiteouts_and_flatten_keeps_them() {
    for fx in fixtures("a_box_derive_records_removals_as_whiteouts_and_flatten_keeps_them") {
        let store = fx.store();
        let kind = fx.kind;
        two_commits(&store, &fx.base, "bx", None);
        // The box writes into its upper directory (what overlayfs does for it): a new file,
        // a deletion of a lower file (a whiteout), a changed history.
        let upper = store.box_layers("bx").expect("box layers").upper;
        write(&upper.join("tmp/box-file"), "box");
        std::fs::create_dir_all(upper.join("keep")).expect("mkdir");
        whiteout(&upper.join("keep/gone"));
        write(&upper.join("home/u/.bash_history"), "box history\n");
        write(&upper.join("keep/l1"), "linked");
        std::fs::hard_link(upper.join("keep/l1"), upper.join("keep/l2")).expect("link");
        let head = commit(&store, "bx", "box work");
        write(&upper.join("tmp/later"), "not committed");
        let upper_copy = fx.base.join("bx-upper");
        snapshot_copy(&upper, &upper_copy);
        let env_json = std::fs::read(store.root().join("envs/bx/env.json")).expect("env.json");

        let derived = store
            .derive(
                "bx",
                "HEAD",
                &Cleanup::checkpoint(),
                DetachOpts::new(CKPT, "warm"),
            )
            .expect("derive")
            .node;
        assert_same(&upper_copy, &upper, &format!("{kind:?} box upper"));
        assert_eq!(
            std::fs::read(store.root().join("envs/bx/env.json")).expect("env.json"),
            env_json
        );
        assert_eq!(store.env("bx").expect("env").head, head);

        let dirs = store.chain_dirs(&derived).expect("chain");
        let view = scan_chain(
            &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            OPAQUE,
        )
        .expect("scan");
        for gone in ["tmp/a", "tmp/box-file", "keep/gone", "var/tmp/x"] {
            assert!(view.get(Path::new(gone)).is_none(), "{kind:?} {gone}");
        }
        assert!(view.get(Path::new("tmp")).is_some_and(|e| e.meta.is_dir()));
        let hist = view
            .get(Path::new("home/u/.bash_history"))
            .expect("history");
        assert_eq!(hist.meta.size, 0);
        // The removed paths stay hidden from the base below the box's layers.
        assert!(is_whiteout(&dirs[0].join("tmp/box-file")), "{kind:?}");
        assert!(is_whiteout(&dirs[0].join("tmp/a")), "{kind:?}");

        let flat = store
            .flatten("bx", CKPT, DetachOpts::new(CKPT, "flat"))
            .expect("flatten");
        let flat_dir = store.backend().layer_dir(&flat.layer);
        assert_eq!(store.chain(&flat).expect("chain").len(), 1);
        for marker in ["tmp/a", "tmp/box-file", "keep/gone"] {
            assert!(is_whiteout(&flat_dir.join(marker)), "{kind:?} {marker}");
        }
        let ino = |p: &str| {
            std::fs::symlink_metadata(flat_dir.join(p))
                .expect("link")
                .ino()
        };
        assert_eq!(
            ino("keep/l1"),
            ino("keep/l2"),
            "{kind:?}: a hard link stays one"
        );
        assert_eq!(
            tree_lines(&[flat_dir]),
            tree_lines(&dirs),
            "{kind:?}: the flattened layer is the merged one"
        );
        store.remove_env("bx").expect("remove");
        store.gc().expect("gc");
        assert_clean(&store, &format!("{kind:?}"));
    }
}

/// A directory a box replaced (deleted, then made anew: overlayfs marks it opaque in the
/// upper directory) hides the base's directory in every later node of the box: also when a
/// later commit only adds to it (on `btrfs` each box layer is the previous one with the
/// captured changes applied, their parent directories unmarked) and after a flatten folds
/// the box's layers into one.
#[test]
fn a_directory_a_box_replaced_stays_opaque_in_later_layers() {
    for fx in fixtures("a_directory_a_box_replaced_stays_opaque_in_later_layers") {
        let store = fx.store();
        let kind = fx.kind;
        two_commits(&store, &fx.base, "bo", None);
        // What the box's layers sit on: the tree it was made from has a `keep/` too.
        let base = fx.base.join("bo-src");
        let upper = store.box_layers("bo").expect("box layers").upper;
        // `rm -rf keep && mkdir keep && echo new > keep/new`, as overlayfs leaves it.
        std::fs::create_dir_all(upper.join("keep")).expect("mkdir");
        xattr::set(upper.join("keep"), OPAQUE, b"y").expect("opaque");
        write(&upper.join("keep/new"), "new");
        commit(&store, "bo", "replaced keep");
        write(&upper.join("keep/new2"), "new2");
        let head = commit(&store, "bo", "added to keep");
        let flat = store
            .flatten("bo", head.as_str(), DetachOpts::new(CKPT, "flat"))
            .expect("flatten");
        for (what, node) in [
            ("head", store.node(head.as_str()).expect("node")),
            ("flattened", flat),
        ] {
            let mut dirs = store.chain_dirs(&node).expect("chain");
            dirs.push(base.clone());
            let view = scan_chain(
                &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
                OPAQUE,
            )
            .expect("scan");
            let keep: Vec<String> = view
                .entries
                .keys()
                .filter(|p| p.starts_with("keep") && p.as_os_str() != "keep")
                .map(|p| p.display().to_string())
                .collect();
            assert_eq!(keep, ["keep/new", "keep/new2"], "{kind:?} {what}");
        }
        store.remove_env("bo").expect("remove");
        store.gc().expect("gc");
        assert_clean(&store, &format!("{kind:?}"));
    }
}

/// The base `root` of a box, with `hidden` paths hidden from it.
fn box_base(root: &Path, hidden: &[&str]) -> agentbox_store::backend::BoxBase {
    agentbox_store::backend::BoxBase {
        root: root.to_owned(),
        hidden: hidden.iter().map(PathBuf::from).collect(),
        shown: Vec::new(),
    }
}

/// A box's layers keep only the whiteouts that hide something of its base: after a file the
/// box made and then deleted (in a directory the base does not have), and a file of the base
/// it deleted, the box's root — its layers mounted over its base by the kernel, after the
/// commit that flattens them on `layers` and after every commit on `btrfs`, whose box layer
/// is the box's whole tree, and in a checkpoint derived from it and in that checkpoint
/// flattened — lists no name it cannot open, and shows neither file.
#[test]
fn a_box_root_lists_no_deleted_file() {
    for fx in fixtures("a_box_root_lists_no_deleted_file") {
        let store = fx.store();
        let kind = fx.kind;
        let base = fx.base.join("root");
        write(&base.join("etc/keep/f"), "the base's file");
        write(&base.join("etc/keep/g"), "another");
        let src = fx.base.join("bb-src");
        write(&src.join("workspace/a"), "a");
        write(&src.join("tmp/junk"), "a checkpoint's cleanup removes it");
        store
            .create_env("bb", None, Source::Dir(src), "initial")
            .expect("create");
        // The box sees its base with `/home` hidden, as a host box does.
        write(&base.join("home/h/.cache/host-file"), "hidden from the box");
        store
            .record_box_base("bb", &box_base(&base, &["/home"]))
            .expect("record the base");
        let hide = fx.base.join("hide");
        std::fs::create_dir_all(hide.join("home")).expect("mkdir");
        xattr::set(hide.join("home"), OPAQUE, b"y").expect("opaque");
        let upper = store.box_layers("bb").expect("box layers").upper;
        write(&upper.join("workspace/x"), "made by the box");
        // Below the hidden `/home`, as the box sees it: its own directories.
        write(&upper.join("home/h/.cache/x"), "the box's cache");
        commit(&store, "bb", "made x");
        // What overlayfs leaves in the upper directory for `rm workspace/x etc/keep/f`.
        std::fs::remove_file(upper.join("workspace/x")).expect("rm");
        std::fs::remove_file(upper.join("home/h/.cache/x")).expect("rm");
        for gone in ["workspace/x", "etc/keep/f", "home/h/.cache/x"] {
            whiteout(&upper.join(gone));
        }
        commit(&store, "bb", "removed x and f");
        // On `layers`, enough commits elsewhere to flatten the box's chain.
        for i in 0..25 {
            write(&upper.join(format!("var/n{i}")), "n");
            commit(&store, "bb", &format!("n{i}"));
        }
        let head = store
            .node(store.env("bb").expect("env").head.as_str())
            .expect("node");
        if kind == BackendKind::Layers {
            let depth = store.chain(&head).expect("chain").len();
            assert!(depth < 25, "{kind:?}: the chain was flattened");
        }
        // A checkpoint of the box (its cleanup deletes `tmp/junk`, in a directory the base
        // lacks), and that checkpoint flattened, are the box's tree too.
        let derived = store
            .derive(
                "bb",
                "HEAD",
                &Cleanup::checkpoint(),
                DetachOpts::new(CKPT, "warm"),
            )
            .expect("derive")
            .node;
        let flat = store
            .flatten("bb", CKPT, DetachOpts::new(CKPT, "flat"))
            .expect("flatten");
        for (what, node) in [("head", head), ("checkpoint", derived), ("flattened", flat)] {
            // The base as the box's runtime mounts it: a layer hiding `/home` over it.
            let mut lowers = store.chain_dirs(&node).expect("chain");
            lowers.push(hide.clone());
            lowers.push(base.clone());
            let (lines, bad) = kernel_lines(&lowers, &fx.base.join(format!("box-root-{what}")));
            let shown = |p: &str| lines.iter().any(|l| l.starts_with(&format!("{p} ")));
            let seen = [
                "workspace/x",
                "etc/keep/f",
                "etc/keep/g",
                "workspace/a",
                "tmp/junk",
                "home/h/.cache/x",
                "home/h/.cache/host-file",
            ]
            .map(shown);
            assert!(
                bad.is_empty(),
                "{kind:?} {what}: listed but not there: {bad:?}"
            );
            let junk = what == "head";
            assert_eq!(
                seen,
                [false, false, true, true, junk, false, false],
                "{kind:?} {what}"
            );
        }
        store.remove_env("bb").expect("remove");
    }
}

/// What a program in a box sees of the layers `lowers` (top first) mounted by the kernel:
/// one line per entry (path, type, mode, size, content), and the names listed that cannot
/// be opened.
fn kernel_lines(lowers: &[PathBuf], at: &Path) -> (Vec<String>, Vec<PathBuf>) {
    fn walk(dir: &Path, rel: &Path, lines: &mut Vec<String>, bad: &mut Vec<PathBuf>) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                bad.push(rel.join(&name));
                continue;
            };
            let content = if m.is_file() {
                std::fs::read_to_string(&path).unwrap_or_default()
            } else {
                String::new()
            };
            lines.push(format!(
                "{} {:o} {} {content:?}",
                rel.join(&name).display(),
                m.mode(),
                if m.is_dir() { 0 } else { m.len() }
            ));
            if m.is_dir() {
                walk(&path, &rel.join(&name), lines, bad);
            }
        }
    }
    std::fs::create_dir_all(at).expect("mkdir");
    crate::common::mount_overlay_ro(lowers, at);
    let (mut lines, mut bad) = (Vec::new(), Vec::new());
    walk(at, Path::new(""), &mut lines, &mut bad);
    rustix::mount::unmount(at, rustix::mount::UnmountFlags::DETACH).expect("unmount");
    (lines, bad)
}

/// A box's chain at the maximum depth is compacted like an environment's (its commits' own
/// layers folded over the layers below), never flattened whole while the folds stay small:
/// over many commits every node, mounted over the box's base by the kernel, shows exactly
/// what the box showed when it was committed, and lists no name it cannot open.
#[test]
fn a_box_chain_is_compacted_and_every_node_shows_what_the_box_did() {
    if !agentbox_testkit::tier::require_root(
        "a_box_chain_is_compacted_and_every_node_shows_what_the_box_did",
    ) {
        return;
    }
    let (home, store) = layers_store_of_depth(4);
    let base = home.path().join("root");
    write(&base.join("etc/keep/f"), "the base's file");
    write(&base.join("etc/keep/g"), "another");
    let src = home.path().join("bc-src");
    for i in 0..60 {
        write(&src.join(format!("workspace/lib/{i}")), "lib");
    }
    store
        .create_env("bc", None, Source::Dir(src), "initial")
        .expect("create");
    store
        .record_box_base("bc", &box_base(&base, &[]))
        .expect("record the base");
    let layers = store.box_layers("bc").expect("box layers");
    let upper = layers.upper.clone();
    let mut nodes = Vec::new();
    let mut compacted = false;
    for round in 0..14 {
        match round % 4 {
            0 => write(&upper.join(format!("workspace/new-{round}")), "new"),
            1 => {
                let _ = std::fs::remove_file(upper.join(format!("workspace/new-{}", round - 1)));
                whiteout(&upper.join(format!("workspace/new-{}", round - 1)));
            }
            2 => whiteout(&upper.join(format!("workspace/lib/{round}"))),
            _ => {
                if !upper.join("etc/keep/f").exists() {
                    whiteout(&upper.join("etc/keep/f"));
                }
            }
        }
        // What the box shows right now: its upper directory over its layers and base.
        let head = store
            .node(store.env("bc").expect("env").head.as_str())
            .expect("node");
        let mut now = vec![upper.clone()];
        now.extend(store.chain_dirs(&head).expect("chain"));
        now.push(base.clone());
        let (shown, _) = kernel_lines(&now, &home.path().join(format!("live-{round}")));
        let id = commit(&store, "bc", &format!("round {round}"));
        let chain = store
            .chain(&store.node(id.as_str()).expect("node"))
            .expect("chain");
        assert!(chain.len() <= 4, "round {round}");
        compacted |= chain[0].compacted;
        nodes.push((id, shown));
    }
    assert!(compacted, "the chain was compacted");
    for (i, (id, shown)) in nodes.iter().enumerate() {
        let mut lowers = store
            .chain_dirs(&store.node(id.as_str()).expect("node"))
            .expect("chain");
        lowers.push(base.clone());
        let (lines, bad) = kernel_lines(&lowers, &home.path().join(format!("node-{i}")));
        assert!(bad.is_empty(), "node {i}: listed but not there: {bad:?}");
        assert_eq!(&lines, shown, "node {i}");
    }
    store.remove_env("bc").expect("remove");
    store.gc().expect("gc");
    assert_clean(&store, "a compacted box");
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

/// On `layers`, a derive from a chain at the store's maximum depth makes one complete layer
/// (folded, then edited in place) instead of a deeper chain; a box's keeps its whiteouts.
#[test]
fn derive_at_the_maximum_depth_makes_a_complete_layer() {
    if !agentbox_testkit::tier::require_root("derive_at_the_maximum_depth_makes_a_complete_layer") {
        return;
    }
    let (home, store) = shallow_layers_store();

    let dir = home.path().join("deep");
    two_commits(&store, home.path(), "deep", Some(&dir));
    let head_copy = home.path().join("deep-head");
    snapshot_copy(&dir, &head_copy);
    let head = store
        .node(&store.env("deep").expect("env").head)
        .expect("head");
    assert_eq!(store.chain(&head).expect("chain").len(), 2);
    let derived = store
        .derive(
            "deep",
            "HEAD",
            &Cleanup::checkpoint(),
            DetachOpts::new(CKPT, "warm"),
        )
        .expect("derive")
        .node;
    let chain = store.chain(&derived).expect("chain");
    assert_eq!((chain.len(), chain[0].parent.as_ref()), (1, None));
    // The complete layer links the chain's files; emptying some of them in it must not
    // reach the chain: the environment still shows its HEAD whole.
    assert_same(
        &head_copy,
        &dir,
        "the environment after a derive at the maximum depth",
    );
    let expected = home.path().join("deep-expected");
    snapshot_copy(&head_copy, &expected);
    for rel in REMOVED {
        remove_keeping_parent(&expected, rel);
    }
    for rel in EMPTIED {
        empty_keeping_meta(&expected, rel);
    }
    let d2 = home.path().join("deep-warm");
    store.fork_node(CKPT, "deep-warm", Some(&d2)).expect("fork");
    assert_same(&expected, &d2, "derived at the maximum depth");
    let layer = store.backend().layer_dir(&chain[0].id);
    assert!(
        !is_whiteout(&layer.join("tmp/a")),
        "no base to hide: removed"
    );

    // A box: its removals stay whiteouts in the complete layer.
    two_commits(&store, home.path(), "deepbox", None);
    let upper = store.box_layers("deepbox").expect("box").upper;
    write(&upper.join("tmp/box-file"), "box");
    commit(&store, "deepbox", "box work");
    let boxed = store
        .derive(
            "deepbox",
            "HEAD",
            &Cleanup::checkpoint(),
            DetachOpts::new("checkpoints/0123456789abcdef/box-1", "warm"),
        )
        .expect("derive")
        .node;
    let chain = store.chain(&boxed).expect("chain");
    assert_eq!(chain.len(), 1);
    let layer = store.backend().layer_dir(&chain[0].id);
    assert!(is_whiteout(&layer.join("tmp/a")));
    assert!(is_whiteout(&layer.join("tmp/box-file")));
    for env in ["deep", "deep-warm", "deepbox"] {
        store.remove_env(env).expect("remove");
    }
    store.gc().expect("gc");
    assert_clean(&store, "maximum depth");
}

/// The overlayfs attributes (`*.overlay.*`) of `path`.
fn overlay_xattrs(path: &Path) -> Vec<String> {
    xattr::list(path)
        .expect("xattrs")
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.contains(".overlay."))
        .collect()
}

fn ino(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).expect("lstat").ino()
}

/// On `layers`, a commit past the maximum depth whose diff layers hold much of the tree
/// makes one complete layer that links the files no write touched to the layers' own (no
/// second copy of their data) and copies the changed ones, a same-size rewrite with its
/// mtime put back included; every node still checks out as it was, and a later flatten of
/// the flattened chain links again.
#[test]
fn a_flattening_commit_links_untouched_files_and_copies_changed_ones() {
    if !agentbox_testkit::tier::require_root(
        "a_flattening_commit_links_untouched_files_and_copies_changed_ones",
    ) {
        return;
    }
    let (home, store) = shallow_layers_store();

    let dir = home.path().join("fl");
    let src = home.path().join("fl-src");
    sample(&src);
    store
        .create_env("fl", Some(&dir), Source::Dir(src), "initial")
        .expect("create");
    write(&dir.join("tmp/from-commit"), "c");
    write(&dir.join("var/log/app.log"), "app log, second version\n");
    std::fs::remove_file(dir.join("keep/gone")).expect("rm");
    // Enough new files that the diff is more than a quarter of the tree: no compaction.
    for i in 0..40 {
        write(&dir.join(format!("bulk/{i}")), "bulk");
    }
    let first = commit(&store, "fl", "second");
    let bottom = store.backend().layer_dir(
        &store
            .chain(&store.node(first.as_str()).expect("node"))
            .expect("chain")[1]
            .id,
    );
    let at_second = home.path().join("at-second");
    snapshot_copy(&dir, &at_second);

    // Same size, mtime put back: only the upper directory tells it apart.
    let same = dir.join("keep/file");
    let mtime = mtime_of(&same);
    std::fs::write(&same, "KEPT").expect("rewrite");
    set_mtime_ns(&same, mtime);
    write(&dir.join("new/file"), "new");
    std::fs::remove_file(dir.join("tmp/c")).expect("rm");
    let flat = commit(&store, "fl", "flattens");
    let at_flat = home.path().join("at-flat");
    snapshot_copy(&dir, &at_flat);
    let chain = store
        .chain(&store.node(flat.as_str()).expect("node"))
        .expect("chain");
    assert_eq!(
        (chain.len(), chain[0].parent.as_ref()),
        (1, None),
        "flattened"
    );
    let layer = store.backend().layer_dir(&chain[0].id);

    for rel in ["var/lib/apt/extended_states", "home/u/.npm/_cacache/index"] {
        assert_eq!(
            ino(&layer.join(rel)),
            ino(&bottom.join(rel)),
            "{rel}: untouched, so linked to the first layer's file"
        );
    }
    assert_eq!(
        ino(&layer.join("home/u/.bash_history")),
        ino(&layer.join("home/u/hist-link")),
        "names of one inode stay one inode"
    );
    assert_ne!(
        ino(&layer.join("keep/file")),
        ino(&bottom.join("keep/file"))
    );
    assert_eq!(
        std::fs::read(layer.join("keep/file")).expect("read"),
        b"KEPT"
    );
    assert!(!layer.join("tmp/c").exists());
    // Written through the overlay: its copy-up's bookkeeping (which the second layer holds)
    // is not carried into the complete layer by a link.
    let second = store.backend().layer_dir(
        &store
            .chain(&store.node(first.as_str()).expect("node"))
            .expect("chain")[0]
            .id,
    );
    let held = overlay_xattrs(&second.join("var/log/app.log"));
    assert!(
        held.iter().any(|n| n.starts_with("trusted.overlay.")),
        "{held:?}"
    );
    let carried = overlay_xattrs(&layer.join("var/log/app.log"));
    assert!(carried.is_empty(), "{carried:?}");

    // Every node as it was.
    store.checkout("fl", first.as_str()).expect("checkout");
    assert_same(&at_second, &dir, "the node before the flatten");
    store.checkout("fl", flat.as_str()).expect("checkout");
    assert_same(&at_flat, &dir, "the flattened node");

    // Two more commits flatten the flattened chain: its files are linked once more.
    write(&dir.join("new/file"), "newer");
    for i in 0..40 {
        write(&dir.join(format!("bulk/{i}")), "rewritten");
    }
    // Attributes overlayfs would obey (a box can set `user.*` ones on its files) never reach
    // a complete layer either.
    xattr::set(dir.join("keep/file"), "user.overlay.whiteout", b"y").expect("xattr");
    commit(&store, "fl", "depth 2");
    write(&dir.join("new/other"), "other");
    let again = commit(&store, "fl", "flattens again");
    let chain = store
        .chain(&store.node(again.as_str()).expect("node"))
        .expect("chain");
    assert_eq!(chain.len(), 1);
    let layer2 = store.backend().layer_dir(&chain[0].id);
    assert_eq!(
        ino(&layer2.join("var/lib/apt/extended_states")),
        ino(&bottom.join("var/lib/apt/extended_states"))
    );
    assert_eq!(
        std::fs::read(layer2.join("new/file")).expect("read"),
        b"newer"
    );
    let carried = overlay_xattrs(&layer2.join("keep/file"));
    assert!(carried.is_empty(), "{carried:?}");
    store.checkout("fl", flat.as_str()).expect("checkout");
    assert_same(
        &at_flat,
        &dir,
        "the first flattened node, after another flatten",
    );

    store.remove_env("fl").expect("remove");
    store.gc().expect("gc");
    assert_clean(&store, "flattening commits");
}

/// On `layers`, a commit past the maximum depth whose diff layers are small folds them and
/// its own changes into one diff over the chain's complete bottom layer: the chain is two
/// deep again, the bottom layer's untouched files are not in the new layer at all, the
/// folded layers' files are linked, and every node — before and after each compaction —
/// checks out exactly as it was committed, through deletions, a replaced directory,
/// type changes and hard links. Once the diffs outgrow a quarter of the tree, a commit
/// makes a complete layer again.
#[test]
fn a_commit_past_the_maximum_depth_compacts_small_diffs_over_the_complete_layer() {
    if !agentbox_testkit::tier::require_root(
        "a_commit_past_the_maximum_depth_compacts_small_diffs_over_the_complete_layer",
    ) {
        return;
    }
    let (home, store) = shallow_layers_store();
    let dir = home.path().join("cp");
    let src = home.path().join("cp-src");
    sample(&src);
    for i in 0..60 {
        write(&src.join(format!("lib/{i}")), &format!("library file {i}"));
    }
    store
        .create_env("cp", Some(&dir), Source::Dir(src), "initial")
        .expect("create");
    let bottom = store
        .chain_dirs(
            &store
                .node(store.env("cp").expect("env").head.as_str())
                .expect("node"),
        )
        .expect("chain")[0]
        .clone();
    let mut nodes: Vec<(NodeId, PathBuf)> = Vec::new();
    let keep = |store: &Store, msg: &str, nodes: &mut Vec<(NodeId, PathBuf)>| {
        let id = commit(store, "cp", msg);
        let copy = home.path().join(format!("at-{}", nodes.len()));
        snapshot_copy(&dir, &copy);
        nodes.push((id, copy));
    };
    // 1: a new file and a changed one (depth 2).
    write(&dir.join("new/a"), "a");
    write(&dir.join("keep/file"), "changed");
    keep(&store, "one", &mut nodes);
    // 2: past the depth: compacts. A deletion of a bottom file, a replaced directory.
    std::fs::remove_file(dir.join("tmp/c")).expect("rm");
    std::fs::remove_dir_all(dir.join("var/log")).expect("rm -r");
    write(&dir.join("var/log/fresh.log"), "fresh");
    keep(&store, "two", &mut nodes);
    // 3: adds to the replaced directory, a file becomes a directory, a hard link.
    write(&dir.join("var/log/more.log"), "more");
    std::fs::remove_file(dir.join("keep/file")).expect("rm");
    write(&dir.join("keep/file/inner"), "now a directory");
    std::fs::hard_link(dir.join("new/a"), dir.join("new/a-link")).expect("link");
    keep(&store, "three", &mut nodes);
    // 4: the new file removed again, a deleted bottom file brought back.
    std::fs::remove_file(dir.join("new/a")).expect("rm");
    write(&dir.join("tmp/c"), "back");
    keep(&store, "four", &mut nodes);

    for (i, (id, _)) in nodes.iter().enumerate().skip(1) {
        let chain = store
            .chain(&store.node(id.as_str()).expect("node"))
            .expect("chain");
        assert_eq!(
            chain.len(),
            2,
            "commit {i} compacts over the complete layer"
        );
        assert_eq!(
            store.backend().layer_dir(&chain[1].id),
            bottom,
            "commit {i}"
        );
    }
    let (last, _) = nodes.last().expect("four commits");
    let top = store
        .chain_dirs(&store.node(last.as_str()).expect("node"))
        .expect("chain")[0]
        .clone();
    assert!(
        !top.join("lib/0").exists(),
        "an untouched file of the bottom layer is not copied"
    );
    assert!(!top.join("var/lib/apt/extended_states").exists());
    let third = store
        .chain_dirs(&store.node(nodes[2].0.as_str()).expect("node"))
        .expect("chain")[0]
        .clone();
    assert_eq!(
        ino(&top.join("var/log/more.log")),
        ino(&third.join("var/log/more.log")),
        "a folded layer's file is linked"
    );

    for (id, copy) in nodes.iter().rev() {
        store.checkout("cp", id.as_str()).expect("checkout");
        assert_same(copy, &dir, &format!("node {id}"));
    }
    let (last, copy) = nodes.last().expect("four commits");
    store.checkout("cp", last.as_str()).expect("checkout");
    assert_same(copy, &dir, "the last node again");

    // Diffs of more than a quarter of the tree: a complete layer.
    for i in 0..60 {
        write(&dir.join(format!("lib/{i}")), "rewritten");
    }
    keep(&store, "rewrites", &mut nodes);
    write(&dir.join("lib/0"), "again");
    keep(&store, "past the depth", &mut nodes);
    let (id, copy) = nodes.last().expect("a node");
    let chain = store
        .chain(&store.node(id.as_str()).expect("node"))
        .expect("chain");
    assert_eq!(chain.len(), 1, "flattened");
    store.checkout("cp", nodes[0].0.as_str()).expect("checkout");
    store.checkout("cp", id.as_str()).expect("checkout");
    assert_same(copy, &dir, "the flattened node");

    store.remove_env("cp").expect("remove");
    store.gc().expect("gc");
    assert_clean(&store, "compacting commits");
}

/// On `layers`, with room for a few commits above the complete layer: a commit at the
/// maximum depth folds only the commits' own layers above the topmost compacted one (a
/// minor compaction, the chain keeps its compacted layers), and when too few are left,
/// everything above the complete layer (a major one). Over many commits of every kind of
/// change the chain never passes the depth, both kinds happen, and every node checks out
/// exactly as it was committed.
#[test]
fn compactions_keep_every_node_as_it_was() {
    if !agentbox_testkit::tier::require_root("compactions_keep_every_node_as_it_was") {
        return;
    }
    let (home, store) = layers_store_of_depth(4);
    let dir = home.path().join("mc");
    let src = home.path().join("mc-src");
    sample(&src);
    for i in 0..60 {
        write(&src.join(format!("lib/{i}")), &format!("library file {i}"));
    }
    store
        .create_env("mc", Some(&dir), Source::Dir(src), "initial")
        .expect("create");
    let mut nodes: Vec<(NodeId, PathBuf)> = Vec::new();
    let (mut minor, mut major) = (false, false);
    for round in 0..18 {
        let f = |name: &str| dir.join(format!("work/{name}"));
        match round % 6 {
            0 => write(&f(&format!("new-{round}")), "new"),
            1 => write(&dir.join(format!("lib/{round}")), "changed"),
            2 => {
                let _ = std::fs::remove_file(f(&format!("new-{}", round - 2)));
                let _ = std::fs::remove_file(dir.join(format!("lib/{}", round + 10)));
            }
            3 => {
                let _ = std::fs::remove_dir_all(dir.join("var/log"));
                write(&dir.join(format!("var/log/only-{round}")), "fresh");
            }
            4 => {
                let _ = std::fs::remove_file(dir.join("keep/file"));
                let _ = std::fs::remove_dir_all(dir.join("keep/file"));
                if round % 12 == 4 {
                    write(&dir.join("keep/file/inner"), "a directory now");
                } else {
                    write(&dir.join("keep/file"), "a file again");
                }
            }
            _ => {
                write(&f(&format!("linked-{round}")), "linked");
                std::fs::hard_link(f(&format!("linked-{round}")), f(&format!("link-{round}")))
                    .expect("link");
            }
        }
        let id = commit(&store, "mc", &format!("round {round}"));
        let copy = home.path().join(format!("at-{round}"));
        snapshot_copy(&dir, &copy);
        let chain = store
            .chain(&store.node(id.as_str()).expect("node"))
            .expect("chain");
        assert!(chain.len() <= 4, "round {round}: {} layers", chain.len());
        let compacted = chain.iter().filter(|l| l.compacted).count();
        if chain[0].compacted {
            if compacted > 1 {
                minor = true;
            } else if chain.len() == 2 {
                major = true;
            }
        }
        nodes.push((id, copy));
    }
    assert!(minor && major, "minor {minor}, major {major}");
    for (id, copy) in nodes.iter().rev() {
        store.checkout("mc", id.as_str()).expect("checkout");
        assert_same(copy, &dir, &format!("node {id}"));
    }
    store.remove_env("mc").expect("remove");
    store.gc().expect("gc");
    assert_clean(&store, "compactions");
}

/// Environment variables of [`kill_target`].
const TARGET_STORE: &str = "AGENTBOX_TEST_KILL_STORE";
const TARGET_OP: &str = "AGENTBOX_TEST_KILL_OP";

/// Not a test of its own: the process [`derive_and_flatten_survive_a_kill_at_every_step`]
/// starts (this test binary, filtered to this function) to run one operation with a
/// failpoint armed. Without the variables it does nothing.
#[test]
fn kill_target() {
    let Some(root) = std::env::var_os(TARGET_STORE) else {
        return;
    };
    let store = Store::open(Path::new(&root)).expect("open");
    match std::env::var(TARGET_OP).expect("an operation").as_str() {
        "derive" => {
            store
                .derive(
                    "cr",
                    "HEAD",
                    &Cleanup::checkpoint(),
                    DetachOpts::new(CKPT, "warm"),
                )
                .expect("derive");
        }
        "flatten" => {
            store
                .flatten("cr", CKPT, DetachOpts::new(CKPT, "flat"))
                .expect("flatten");
        }
        other => panic!("unknown operation {other:?}"),
    }
}

/// Run `op` in a child process that dies at failpoint `point`.
fn kill_at(store: &Store, op: &str, point: &str) {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["checkpoints::kill_target", "--exact", "--nocapture"])
        .env(TARGET_STORE, store.root())
        .env(TARGET_OP, op)
        .env("AGENTBOX_FAILPOINT", point)
        .output()
        .expect("run the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_none() && stderr.contains(point),
        "{op} at {point}: expected a death at the failpoint, got {:?}\n{stderr}",
        out.status
    );
}

/// What a kill left, as `prune --dry-run` sees it before anything reconciles.
fn left_after_kill(store: &Store) -> BTreeSet<LeftoverKind> {
    let raw = Store::open_unreconciled(store.root()).expect("open as the kill left it");
    let report = raw.prune_leftovers(true).expect("dry run");
    assert!(report.busy.is_none());
    report.items.into_iter().map(|i| i.leftover.kind).collect()
}

/// What a kill at `point` leaves (as [`left_after_kill`] reports it).
fn expected_leftovers(point: &str) -> BTreeSet<LeftoverKind> {
    use LeftoverKind::*;
    match point.split_once(':').map_or(point, |(_, step)| step) {
        "after-copy" => BTreeSet::from([TempLayer]),
        "after-layer" => BTreeSet::from([UnrecordedLayer]),
        "after-record" => BTreeSet::from([UnreferencedLayer]),
        "after-node" => BTreeSet::from([UnreferencedNode, UnreferencedLayer]),
        _ => BTreeSet::new(),
    }
}

/// After a kill: the store opens (reconciling), `fsck` finds only repairable problems,
/// `prune` removes them, and then everything on disk is in use.
fn recovers(store: &Store, what: &str) -> Store {
    let store = Store::open(store.root()).expect("open after the kill");
    let report = store.fsck(false).expect("fsck");
    assert!(
        report.problems.iter().all(|p| p.repairable),
        "{what}: {:?}",
        report.problems
    );
    store.prune_leftovers(false).expect("prune");
    assert_clean(&store, what);
    store
}

#[test]
fn derive_and_flatten_survive_a_kill_at_every_step() {
    for fx in fixtures("derive_and_flatten_survive_a_kill_at_every_step") {
        let store = fx.store();
        let kind = fx.kind;
        let dir = fx.dir("cr");
        two_commits(&store, &fx.base, "cr", Some(&dir));
        let head = store.env("cr").expect("env").head;
        // What a derive that completes makes, to compare with.
        let want = {
            let n = store
                .derive(
                    "cr",
                    "HEAD",
                    &Cleanup::checkpoint(),
                    DetachOpts::new("scratch/want", "want"),
                )
                .expect("derive")
                .node;
            let d = node_digest(&store, &n);
            store.set_ref("scratch/want", None).expect("unref");
            store.gc().expect("gc");
            d
        };
        for point in [
            "derive:after-copy",
            "derive:after-layer",
            "derive:after-record",
            "derive:after-node",
            "derive:after-ref",
        ] {
            let what = format!("{kind:?} {point}");
            kill_at(&store, "derive", point);
            assert_eq!(left_after_kill(&store), expected_leftovers(point), "{what}");
            let store = recovers(&store, &what);
            // The ref is the commit point.
            match store.get_ref(CKPT).expect("ref") {
                Some(id) => {
                    assert_eq!(point, "derive:after-ref", "{what}");
                    assert_eq!(node_digest(&store, &store.node(&id).expect("node")), want);
                }
                None => assert_ne!(point, "derive:after-ref", "{what}"),
            }
            assert_eq!(store.env("cr").expect("env").head, head, "{what}");
            store.set_ref(CKPT, None).expect("unref");
            store.gc().expect("gc");
            assert_clean(&store, &what);
        }

        let derived = store
            .derive(
                "cr",
                "HEAD",
                &Cleanup::checkpoint(),
                DetachOpts::new(CKPT, "warm"),
            )
            .expect("derive")
            .node;
        // On btrfs a flatten makes no layer (the node shares its source's).
        let points: &[&str] = match kind {
            BackendKind::Layers => &[
                "flatten:after-copy",
                "flatten:after-layer",
                "flatten:after-record",
                "flatten:after-node",
                "flatten:after-ref",
            ],
            BackendKind::Btrfs => &["flatten:after-node", "flatten:after-ref"],
        };
        for point in points {
            let what = format!("{kind:?} {point}");
            kill_at(&store, "flatten", point);
            let mut want_left = expected_leftovers(point);
            if *point == "flatten:after-ref" {
                // The ref moved: the derived node it named is unreferenced now.
                want_left.insert(LeftoverKind::UnreferencedNode);
                if kind == BackendKind::Layers {
                    want_left.insert(LeftoverKind::UnreferencedLayer);
                }
            } else if *point == "flatten:after-node" && kind == BackendKind::Btrfs {
                // The flattened node shares the derived node's layer, which stays in use.
                want_left.remove(&LeftoverKind::UnreferencedLayer);
            }
            assert_eq!(left_after_kill(&store), want_left, "{what}");
            let store = recovers(&store, &what);
            let id = store.get_ref(CKPT).expect("ref").expect("set");
            let node = store.node(&id).expect("node");
            if *point == "flatten:after-ref" {
                assert_eq!(
                    node.detached.as_ref().map(|d| d.how),
                    Some(DetachedHow::Flatten),
                    "{what}"
                );
                assert_eq!(store.chain(&node).expect("chain").len(), 1);
            } else {
                assert_eq!(id, derived.id, "{what}: the ref has not moved");
            }
            assert_eq!(node_digest(&store, &node), want, "{what}");
            if *point != "flatten:after-ref" {
                store.gc().expect("gc");
                assert_clean(&store, &what);
            }
        }
        store.remove_env("cr").expect("remove");
    }
}

/// The cleanup of a box's checkpoint: [`Cleanup::checkpoint`] plus the secret-bearing files
/// the boxes layer adds (`git.envPatterns` under `/workspace`, agents' credentials).
fn secret_cleanup() -> Cleanup {
    let mut c = Cleanup::checkpoint();
    c.delete.extend(
        [
            "/workspace/**/.env",
            "/workspace/**/.env.*",
            "/workspace/**/*.env",
            "**/.claude/.credentials.json",
            "**/.git-credentials",
            "**/.netrc",
        ]
        .map(String::from),
    );
    c
}

/// Files a derive must find wherever they are: `(path below a directory of the tree,
/// content)`. Anchored ones (`tmp/`, `var/`, `workspace/`) are put at the root.
const PLANTED: [(&str, &str); 10] = [
    (".bash_history", "rm -rf /\n"),
    (".claude/.credentials.json", "{\"token\": \"sk-secret\"}"),
    (".npm/_logs/1-debug.log", "npm log"),
    (".netrc", "machine x password y"),
    ("tmp/scratch/x", "tmp"),
    ("var/log/sub/app.log", "log line\n"),
    ("var/lib/apt/lists/main", "lists"),
    ("workspace/.env", "TOKEN=1"),
    ("workspace/deep/er/prod.env", "TOKEN=2"),
    ("workspace/\u{e9}t\u{e9}/.env.local", "TOKEN=3"),
];

/// Plant `picks` (`(directory index, planted index)`) below directories of `spec`
/// materialized at `root`, and, for one pick, a second name of the planted file (a hard
/// link the cleanup must empty too) and a directory whose name is not UTF-8.
fn plant(
    root: &Path,
    spec: &agentbox_testkit::tree_gen::TreeSpec,
    picks: &[(proptest::sample::Index, usize)],
) {
    use agentbox_testkit::tree_gen::NodeKind;
    use std::os::unix::ffi::OsStrExt;
    let mut dirs: Vec<PathBuf> = vec![PathBuf::new()];
    dirs.extend(
        spec.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Dir)
            .map(|n| n.path.clone()),
    );
    for (i, (dir, which)) in picks.iter().enumerate() {
        let (rel, content) = PLANTED[*which % PLANTED.len()];
        let anchored = ["tmp/", "var/", "workspace/"]
            .iter()
            .any(|a| rel.starts_with(a));
        let base = if anchored {
            PathBuf::new()
        } else {
            dir.get(&dirs).clone()
        };
        let path = root.join(&base).join(rel);
        // A planted path may run into a file of the random tree: then it is not planted.
        if path
            .parent()
            .is_some_and(|p| std::fs::create_dir_all(p).is_err())
        {
            continue;
        }
        let _ = std::fs::remove_dir_all(&path);
        if std::fs::write(&path, content).is_err() {
            continue;
        }
        if i == 0 && rel == ".bash_history" {
            let _ = std::fs::hard_link(&path, path.with_file_name("history-link"));
        }
    }
    let odd = root
        .join("workspace")
        .join(std::ffi::OsStr::from_bytes(b"\xff\xfe"));
    std::fs::create_dir_all(&odd).expect("mkdir");
    std::fs::write(odd.join(".env"), "TOKEN=4").expect("write");
}

/// One line per entry of `dirs`' merged tree as [`tree_lines`] has it, after `plan` is
/// applied to the lines: the removed entries (and what is below them) gone, the emptied
/// files empty. What the derived node's tree must be.
fn lines_after<P: AsRef<Path>>(dirs: &[P], plan: &agentbox_store::CleanupPlan) -> Vec<String> {
    let removed: Vec<&Path> = plan.delete.iter().map(|e| e.rel.as_path()).collect();
    let emptied: BTreeSet<&Path> = plan.truncate.iter().map(|e| e.rel.as_path()).collect();
    let empty_hash = blake3::hash(b"").to_hex().to_string();
    let refs: Vec<&Path> = dirs.iter().map(AsRef::as_ref).collect();
    let tree = scan_chain(&refs, OPAQUE).expect("scan");
    let mut out = Vec::new();
    for ((rel, e), line) in tree.entries.iter().zip(tree_lines(dirs)) {
        if removed.iter().any(|r| rel.starts_with(r)) {
            continue;
        }
        if !emptied.contains(rel.as_path()) {
            out.push(line);
            continue;
        }
        // Size and content hash of the emptied file; the rest of the line is unchanged.
        let size = format!(" {} ", e.meta.size);
        let mut fields: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let last = fields.len() - 1;
        fields[last] = empty_hash.clone();
        let line = fields.join(" ").replacen(&size, " 0 ", 1);
        out.push(line);
    }
    out
}

/// The plan found from the listings is the plan of a scan of the whole tree.
fn assert_plans_agree(store: &Store, node: &Node, cleanup: &Cleanup, what: &str) {
    let fast = store
        .cleanup_plan(node, cleanup)
        .expect("plan from listings");
    let dirs = store.chain_dirs(node).expect("chain");
    let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let full = cleanup
        .plan(&scan_chain(&refs, OPAQUE).expect("scan"))
        .expect("plan");
    assert_eq!(fast, full, "{what}");
}

/// The paths of the merged tree of `node` that still hold a planted secret: a `.netrc`, a
/// `.claude/.credentials.json`, a `.env`-like file under `workspace/`, a non-empty
/// `.bash_history`.
fn secrets_left(store: &Store, node: &Node) -> Vec<String> {
    let dirs = store.chain_dirs(node).expect("chain");
    let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let is_secret = |e: &agentbox_store::fsops::Entry| {
        let Some(name) = e.rel.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        let parent = e.rel.parent().and_then(|p| p.file_name());
        let in_workspace = e.rel.starts_with("workspace");
        e.meta.kind == Kind::File
            && match name {
                ".netrc" => true,
                ".credentials.json" => parent == Some(std::ffi::OsStr::new(".claude")),
                ".bash_history" => e.meta.size > 0,
                n => in_workspace && (n == ".env" || n.starts_with(".env.") || n.ends_with(".env")),
            }
    };
    scan_chain(&refs, OPAQUE)
        .expect("scan")
        .entries
        .values()
        .filter(|e| is_secret(e))
        .map(|e| e.rel.to_string_lossy().into_owned())
        .collect()
}

/// Derive on random trees spread over several layers, as a box makes them: files planted
/// anywhere (secrets deep in the tree, under a name that is not UTF-8, hard-linked
/// histories), hidden again by whiteouts and opaque directories of later layers, then a
/// box started from the checkpoint adds its own. The plan found from the layers' listings
/// (skipping what a derive already cleaned) is always the plan of a full scan, the derived
/// tree is the reference plan applied, and no planted secret is left; also with listings
/// missing, torn or walked again, and with a cleanup the lower layers were not cleaned by.
#[test]
fn derive_from_listings_matches_a_full_scan() {
    use agentbox_testkit::tree_gen::{materialize, tree_spec};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    for fx in fixtures("derive_from_listings_matches_a_full_scan") {
        let store = fx.store();
        let kind = fx.kind;
        let cleanup = secret_cleanup();
        let picks =
            || prop::collection::vec((any::<proptest::sample::Index>(), 0..PLANTED.len()), 0..8);
        let strategy = (
            tree_spec(),
            picks(),
            tree_spec(),
            picks(),
            picks(),
            any::<bool>(),
        );
        let mut runner = TestRunner::new(Config {
            cases: 12,
            failure_persistence: None,
            ..Config::default()
        });
        let case = std::cell::Cell::new(0u32);
        runner
            .run(&strategy, |(t1, p1, t2, p2, p3, mounted)| {
                let n = case.get();
                case.set(n + 1);
                let env = format!("px{n}");
                let what = |step: &str| {
                    format!(
                        "{kind:?} case {n} ({}): {step}",
                        if mounted { "mounted" } else { "box" }
                    )
                };
                // Layer 1: the first tree with secrets planted in it.
                let src = fx.base.join(format!("{env}-src"));
                materialize(&t1, &src);
                plant(&src, &t1, &p1);
                let dir = fx.dir(&env);
                let mountpoint = mounted.then_some(dir.as_path());
                store
                    .create_env(&env, mountpoint, Source::Dir(src.clone()), "initial")
                    .expect("create");
                // Layer 2: a second tree written over it, more secrets, some of the first
                // layer's hidden (whiteouts) or replaced (an opaque directory).
                let top = if mounted {
                    dir.clone()
                } else {
                    store.box_layers(&env).expect("box").upper
                };
                let second = fx.base.join(format!("{env}-second"));
                materialize(&t2, &second);
                plant(&second, &t2, &p2);
                copy_over(&second, &top.join("workspace/second"));
                let first: Vec<PathBuf> = scan_tree(&src)
                    .expect("scan")
                    .entries
                    .into_keys()
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect();
                for (i, rel) in first.iter().enumerate() {
                    if i % 3 != 0 {
                        continue;
                    }
                    let at = top.join(rel);
                    if mounted {
                        let _ = std::fs::remove_dir_all(&at).or_else(|_| std::fs::remove_file(&at));
                    } else if at
                        .parent()
                        .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
                        && std::fs::symlink_metadata(&at).is_err()
                    {
                        if i % 2 == 0 {
                            whiteout(&at);
                        } else if src.join(rel).is_dir() && !src.join(rel).is_symlink() {
                            std::fs::create_dir(&at).expect("mkdir");
                            xattr::set(&at, "trusted.overlay.opaque", b"y").expect("opaque");
                            write(&at.join(".netrc"), "in an opaque directory");
                        }
                    }
                }
                let head = store.node(&commit(&store, &env, "second")).expect("node");
                assert_plans_agree(&store, &head, &cleanup, &what("two layers"));

                // The checkpoint: its tree is the reference plan applied, with no secret.
                let ckpt = format!("checkpoints/0123456789abcdef/{env}");
                let head_dirs = store.chain_dirs(&head).expect("chain");
                let reference = {
                    let refs: Vec<&Path> = head_dirs.iter().map(PathBuf::as_path).collect();
                    cleanup
                        .plan(&scan_chain(&refs, OPAQUE).expect("scan"))
                        .expect("plan")
                };
                let derived = store
                    .derive(&env, "HEAD", &cleanup, DetachOpts::new(&ckpt, "warm"))
                    .expect("derive")
                    .node;
                let derived_dirs = store.chain_dirs(&derived).expect("chain");
                assert_eq!(
                    tree_lines(&derived_dirs),
                    lines_after(&head_dirs, &reference),
                    "{}",
                    what("derived tree")
                );
                assert_eq!(
                    secrets_left(&store, &derived),
                    Vec::<String>::new(),
                    "{}",
                    what("secrets")
                );

                // A box from the checkpoint adds its own secrets; the checkpoint's layer is
                // clean for this cleanup, so only what is above it is looked at.
                let child = format!("{env}-b");
                store.fork_node(&ckpt, &child, None).expect("fork");
                let upper = store.box_layers(&child).expect("box").upper;
                let third = fx.base.join(format!("{env}-third"));
                materialize(&t1, &third);
                plant(&third, &t1, &p3);
                copy_over(&third, &upper);
                let child_head = store.node(&commit(&store, &child, "third")).expect("node");
                assert_plans_agree(&store, &child_head, &cleanup, &what("over a checkpoint"));
                let again = store
                    .derive(
                        &child,
                        "HEAD",
                        &cleanup,
                        DetachOpts::new(format!("{ckpt}-2"), "warm"),
                    )
                    .expect("derive")
                    .node;
                assert_eq!(
                    secrets_left(&store, &again),
                    Vec::<String>::new(),
                    "{}",
                    what("secrets over a checkpoint")
                );
                // A cleanup the checkpoint did not apply looks at every layer.
                let mut more = cleanup.clone();
                more.delete.push("**/f*".into());
                assert_plans_agree(&store, &child_head, &more, &what("another cleanup"));

                // Listings lost, torn or never written: walked (and kept) instead.
                for (i, layer) in store.chain(&child_head).expect("chain").iter().enumerate() {
                    let listing = store
                        .root()
                        .join("layers")
                        .join(format!("{}.paths", layer.id));
                    match i % 3 {
                        0 => {
                            let _ = std::fs::remove_file(&listing);
                        }
                        1 => {
                            let _ = std::fs::write(
                                &listing,
                                b"agentbox-layer-paths 1\nbase -\ncount 0\n",
                            );
                        }
                        _ => {}
                    }
                }
                assert_plans_agree(&store, &child_head, &more, &what("listings lost"));
                assert_plans_agree(&store, &head, &cleanup, &what("listings lost, below"));
                assert_plans_agree(&store, &child_head, &more, &what("listings walked again"));

                for e in [&child, &env] {
                    store.remove_env(e).expect("remove");
                }
                for r in [ckpt.clone(), format!("{ckpt}-2")] {
                    store.set_ref(&r, None).expect("unref");
                }
                store.gc().expect("gc");
                assert_clean(&store, &what("after gc"));
                let left: Vec<String> = std::fs::read_dir(store.root().join("layers"))
                    .expect("layers")
                    .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".paths"))
                    .collect();
                assert_eq!(
                    left,
                    Vec::<String>::new(),
                    "{}",
                    what("listings freed with their layers")
                );
                Ok(())
            })
            .expect("derive from listings agrees with a full scan");
    }
}

/// Copy the tree at `src` over `dst` (merging directories), exactly.
fn copy_over(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    agentbox_store::fsops::copy::copy_dir(src, dst, &Default::default()).expect("copy");
}
