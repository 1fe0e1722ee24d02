//! Conformance suite: every test runs against every backend (tier 2: mounts need root).
//!
//! * `layers` on a temporary directory of the test machine's filesystem;
//! * `btrfs` on a fresh btrfs filesystem on a loop device.

use std::path::Path;

use agentbox_core::id::NodeId;
use agentbox_store::{CommitOpts, Error, Source, Store};

use crate::common::{
    assert_same, commit, export_zstd, fixtures, import_bundle, read, snapshot_copy, write,
};

#[test]
fn commit_checkout_round_trip() {
    for fx in fixtures("commit_checkout_round_trip") {
        let store = fx.store();
        assert_eq!(store.config().backend, fx.kind);
        let src = fx.base.join("src");
        write(&src.join("a.txt"), "one");
        write(&src.join("sub/b.txt"), "two");
        let dir = fx.dir("proj");
        let st = store
            .create_env("proj", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");
        assert_eq!(read(&dir.join("a.txt")), "one");
        let root = st.head.clone();
        let refs = fx.base.join("refs");
        snapshot_copy(&dir, &refs.join("0"));

        // Change, delete, replace a directory by a file and a file by a directory.
        write(&dir.join("a.txt"), "one changed");
        write(&dir.join("new/deep/c.txt"), "three");
        std::fs::remove_dir_all(dir.join("sub")).expect("rm sub");
        write(&dir.join("sub"), "sub is a file now");
        let n1 = commit(&store, "proj", "first change");
        snapshot_copy(&dir, &refs.join("1"));

        std::fs::remove_file(dir.join("sub")).expect("rm");
        write(&dir.join("sub/again.txt"), "dir again");
        std::fs::remove_dir_all(dir.join("new")).expect("rm new");
        let n2 = commit(&store, "proj", "second change");
        snapshot_copy(&dir, &refs.join("2"));

        // Uncommitted edits are discarded by a checkout.
        write(&dir.join("scratch"), "x");
        for (id, r) in [
            (&root, "0"),
            (&n2, "2"),
            (&n1, "1"),
            (&root, "0"),
            (&n2, "2"),
        ] {
            let node = store.checkout("proj", id).expect("checkout");
            assert_eq!(&node.id, id);
            assert_same(
                &refs.join(r),
                &dir,
                &format!("{:?} checkout of {r}", fx.kind),
            );
        }
        assert_eq!(store.env("proj").expect("env").head, n2);
        let log: Vec<NodeId> = store
            .log("proj")
            .expect("log")
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert_eq!(log, vec![n2.clone(), n1.clone(), root.clone()]);
        store.remove_env("proj").expect("destroy");
        assert!(!agentbox_store::mounts::is_mountpoint(&dir));
    }
}

#[test]
fn refs_tags_and_errors() {
    for fx in fixtures("refs_tags_and_errors") {
        let store = fx.store();
        let dir = fx.dir("t");
        store
            .create_env("tenv", Some(&dir), Source::Empty, "empty")
            .expect("create");
        write(&dir.join("f"), "1");
        let a = commit(&store, "tenv", "a");
        write(&dir.join("f"), "2");
        let b = commit(&store, "tenv", "b");
        assert_eq!(store.resolve("tenv", "HEAD").expect("HEAD"), b);
        assert_eq!(store.resolve("tenv", "HEAD~1").expect("HEAD~1"), a);
        assert_eq!(store.resolve("tenv", &a[..6]).expect("prefix"), a);
        store.set_tag("tenv", "v1", &a[..8]).expect("tag");
        assert_eq!(store.resolve("tenv", "v1").expect("tag"), a);
        store.set_tag("tenv", "v1", "HEAD").expect("move tag");
        assert_eq!(store.resolve("tenv", "v1").expect("tag"), b);
        assert!(matches!(
            store.set_tag("tenv", "abcd", "HEAD"),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            store.resolve("tenv", "nope"),
            Err(Error::UnknownRef { .. })
        ));
        assert!(matches!(
            store.resolve("tenv", "HEAD~9"),
            Err(Error::UnknownRef { .. })
        ));
        assert!(matches!(
            store.checkout("tenv", "zzz"),
            Err(Error::UnknownRef { .. })
        ));
        store.delete_tag("tenv", "v1").expect("delete tag");
        assert!(store.resolve("tenv", "v1").is_err());
        // Deleting: refuses HEAD; children move to the parent.
        assert!(matches!(
            store.delete_node("tenv", "HEAD"),
            Err(Error::Refused { .. })
        ));
        let deleted = store.delete_node("tenv", &a).expect("delete a");
        assert_eq!(deleted.id, a);
        let bn = store.node(&b).expect("b");
        assert_eq!(bn.parent, deleted.parent);
        // b's data is intact after GC even on layers, where b's chain runs through a's layer.
        store.gc().expect("gc");
        store.checkout("tenv", "HEAD").expect("checkout");
        assert_eq!(read(&dir.join("f")), "2");
        let report = store.fsck(false).expect("fsck");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        // A second writer gets an error naming the holder.
        let _held = agentbox_core::lock::FileLock::acquire(
            &store.root().join("envs/tenv/lock"),
            agentbox_core::lock::Mode::TryExclusive,
            "env",
            "holding for the test",
        )
        .expect("hold");
        let err = store
            .commit("tenv", CommitOpts::default())
            .expect_err("locked");
        assert!(err.to_string().contains("holding for the test"), "{err}");
    }
}

#[test]
fn fork_shares_nodes_and_envs_commit_independently() {
    for fx in fixtures("fork_shares_nodes") {
        let store = fx.store();
        let d1 = fx.dir("one");
        store
            .create_env("one", Some(&d1), Source::Empty, "e")
            .expect("create");
        write(&d1.join("shared"), "base");
        let base = commit(&store, "one", "base");
        let d2 = fx.dir("two");
        store
            .fork_env("one", &base, "two", Some(&d2))
            .expect("fork");
        assert_eq!(read(&d2.join("shared")), "base");
        // Two threads commit to two environments at once: no work is lost.
        let root = store.root().to_owned();
        let handles: Vec<_> = [("one", d1.clone()), ("two", d2.clone())]
            .into_iter()
            .map(|(env, dir)| {
                let root = root.clone();
                std::thread::spawn(move || {
                    let store = Store::open(&root).expect("open");
                    for i in 0..10 {
                        write(&dir.join(format!("{env}-{i}")), env);
                        commit(&store, env, &format!("{env} {i}"));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
        for env in ["one", "two"] {
            let log = store.log(env).expect("log");
            assert_eq!(log.len(), 12, "{env}: root, base, 10 commits");
            assert_eq!(log.last().map(|n| n.env.as_str()), Some("one"));
        }
        assert!(d1.join("one-9").exists() && !d1.join("two-9").exists());
        assert!(d2.join("two-9").exists() && !d2.join("one-0").exists());
    }
}

#[test]
fn retention_keeps_structure_and_thins_the_tail() {
    for fx in fixtures("retention") {
        let store = fx.store();
        let dir = fx.dir("r");
        store
            .create_env("r", Some(&dir), Source::Empty, "e")
            .expect("create");
        let mut ids = Vec::new();
        for i in 0..120 {
            write(&dir.join("f"), &i.to_string());
            ids.push(commit(&store, "r", &format!("c{i}")));
            if i == 30 {
                store.set_tag("r", "keepme", "HEAD").expect("tag");
            }
            store.retain("r", 8).expect("retain");
        }
        let n = store.history("r").expect("history").nodes.len();
        assert!(n <= 8 + 10, "about keep + log2(120) nodes remain, got {n}");
        assert!(store.node(&ids[30]).is_ok(), "tagged node kept");
        let again = store.retain("r", 8).expect("retain again");
        assert!(again.dropped.is_empty(), "idempotent: {:?}", again.dropped);
        store.gc().expect("gc");
        // Every surviving node still checks out with the right content.
        for node in store.history("r").expect("history").nodes {
            store.checkout("r", &node.id).expect("checkout");
            if let Some(i) = node.message.strip_prefix('c') {
                assert_eq!(read(&dir.join("f")), i);
            }
        }
    }
}

#[test]
fn export_import_history_round_trip() {
    for fx in fixtures("export_import_history") {
        let store = fx.store();
        let dir = fx.dir("x");
        let src = fx.base.join("xsrc");
        write(&src.join("keep"), "k");
        write(&src.join("dir/inner"), "i");
        store
            .create_env("x", Some(&dir), Source::Dir(src), "initial")
            .expect("create");
        let refs = fx.base.join("xrefs");
        snapshot_copy(&dir, &refs.join("0"));
        write(&dir.join("added"), "a");
        std::fs::remove_dir_all(dir.join("dir")).expect("rm");
        // New bytes, same size, the old modification time put back: only the change time
        // (or the inode) tells the export that the content moved.
        let keep = dir.join("keep");
        let before = std::fs::metadata(&keep)
            .expect("stat")
            .modified()
            .expect("mtime");
        write(&keep, "K");
        std::fs::File::options()
            .write(true)
            .open(&keep)
            .and_then(|f| f.set_modified(before))
            .expect("restore mtime");
        let n1 = commit(&store, "x", "one");
        snapshot_copy(&dir, &refs.join("1"));
        store.set_tag("x", "v1", "HEAD").expect("tag");
        // A second branch from the root: the root's tree serves two children.
        store.checkout("x", "HEAD~1").expect("back to the root");
        write(&dir.join("branch"), "b");
        let n2 = commit(&store, "x", "two");
        snapshot_copy(&dir, &refs.join("2"));
        store.set_tag("x", "v2", "HEAD").expect("tag");
        let bundle = fx.base.join("x.bundle");
        export_zstd(&store, "x", "HEAD", "history", &bundle);
        // Into a fresh store.
        let other = Store::open_or_init(&fx.base.join("store2"), Some(fx.kind)).expect("store2");
        let d2 = fx.dir("imported");
        let rep = import_bundle(&other, &bundle, "y", &d2);
        assert_eq!(rep.nodes, 3);
        assert_eq!(other.resolve("y", "v1").expect("tag"), n1);
        assert_eq!(other.resolve("y", "v2").expect("tag"), n2);
        assert_same(&refs.join("2"), &d2, "imported head");
        other
            .checkout("y", "v1")
            .expect("checkout the other branch");
        assert_same(&refs.join("1"), &d2, "imported first branch");
        other.checkout("y", "HEAD~1").expect("checkout root");
        assert_same(&refs.join("0"), &d2, "imported root");

        // Back into the store that made it, with one node more: the three nodes it holds
        // stay as they are (their layers are checked, not unpacked), the new one is laid
        // over them.
        other.checkout("y", "v2").expect("back to the head");
        write(&d2.join("more"), "m");
        commit(&other, "y", "three");
        snapshot_copy(&d2, &refs.join("3"));
        let bundle2 = fx.base.join("y.bundle");
        export_zstd(&other, "y", "HEAD", "history", &bundle2);
        let records = store.root().join("layers");
        let count = || {
            std::fs::read_dir(&records)
                .expect("layer records")
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json"))
                })
                .count()
        };
        let before = count();
        let d3 = fx.dir("back");
        let rep = import_bundle(&store, &bundle2, "z", &d3);
        assert_eq!((rep.nodes, rep.reused_nodes), (4, 3));
        assert_eq!(count(), before + 1, "one layer, for the one new node");
        assert_same(&refs.join("3"), &d3, "re-imported head");
        store.checkout("z", "v1").expect("checkout a held node");
        assert_same(&refs.join("1"), &d3, "re-imported first branch");
        let leftovers: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
            .map(|rd| rd.map(|e| e.expect("entry").file_name()).collect())
            .unwrap_or_default();
        assert!(leftovers.is_empty(), "staging left: {leftovers:?}");
        other.remove_env("y").expect("destroy");
    }
}

/// Attributes that look like overlayfs markers of the namespace the store does not use
/// (`user.overlay.*` in a store made by root) are plain attributes a box may set: a file
/// carrying `user.overlay.whiteout` and a directory carrying `user.overlay.opaque` are
/// shown, diffed, exported and checked out as what they are, never as a deletion.
#[test]
fn foreign_overlay_markers_hide_nothing() {
    for fx in fixtures("foreign_overlay_markers_hide_nothing") {
        let store = fx.store();
        let src = fx.base.join("msrc");
        write(&src.join("keep"), "k");
        write(&src.join("d/low"), "below");
        let dir = fx.dir("markers");
        store
            .create_env("m", Some(&dir), Source::Dir(src), "initial")
            .expect("create");
        write(&dir.join("payload.sh"), "echo unreviewed");
        xattr::set(dir.join("payload.sh"), "user.overlay.whiteout", b"").expect("setxattr");
        write(&dir.join("d/new"), "n");
        xattr::set(dir.join("d"), "user.overlay.opaque", b"y").expect("setxattr");
        let refs = fx.base.join("mrefs");
        snapshot_copy(&dir, &refs.join("1"));
        commit(&store, "m", "markers");
        store.set_tag("m", "marked", "HEAD").expect("tag");

        let (_, changes) = store.show("m", "HEAD").expect("show");
        let changed: Vec<String> = changes
            .iter()
            .map(|c| format!("{:?} {}", c.kind, c.path.display()))
            .collect();
        assert!(
            changed.contains(&"Added payload.sh".to_owned()),
            "{:?}: {changed:?}",
            fx.kind
        );
        assert!(
            !changed.iter().any(|c| c.contains("d/low")),
            "{:?}: {changed:?}",
            fx.kind
        );

        let bundle = fx.base.join("markers.bundle");
        export_zstd(&store, "m", "HEAD", "snapshot", &bundle);
        let other = Store::open_or_init(&fx.base.join("mstore2"), Some(fx.kind)).expect("store2");
        let imported = fx.dir("markers-imported");
        import_bundle(&other, &bundle, "m2", &imported);
        assert_eq!(read(&imported.join("payload.sh")), "echo unreviewed");
        assert_eq!(read(&imported.join("d/low")), "below");
        other.remove_env("m2").expect("destroy");

        store.checkout("m", "HEAD~1").expect("checkout the parent");
        assert!(!dir.join("payload.sh").exists());
        store
            .checkout("m", "marked")
            .expect("checkout the marked node");
        assert_same(&refs.join("1"), &dir, "the marked node checked out");
        store.remove_env("m").expect("destroy");
    }
}

/// A history bundle whose second layer marks its root opaque (a crafted bundle: the
/// format allows it, `export` never writes it) means "nothing of the base": the imported
/// node shows that layer alone on every backend, and its base still checks out whole.
#[test]
fn an_opaque_layer_root_hides_the_whole_base() {
    use agentbox_store::bundle::{layer_from_trees, BundleKind, Compression, Manifest};
    use agentbox_store::fsops::scan_tree;
    for fx in fixtures("an_opaque_layer_root_hides_the_whole_base") {
        let (t0, t1) = (fx.base.join("t0"), fx.base.join("t1"));
        write(&t0.join("a"), "from the base");
        write(&t0.join("d/x"), "from the base too");
        write(&t1.join("b"), "the only file");
        let (s0, s1) = (scan_tree(&t0).expect("scan"), scan_tree(&t1).expect("scan"));
        let l0 = layer_from_trees(None, &s0).expect("layer 0");
        let mut l1 = layer_from_trees(Some(&s0), &s1).expect("layer 1");
        l1.whiteouts.clear();
        l1.opaque_dirs.push(std::path::PathBuf::new());
        let mut m = Manifest::new(BundleKind::History, "demo", "n1");
        m.nodes.push(crate::bundle::node("n0", None, None));
        m.nodes
            .push(crate::bundle::node("n1", Some("n0"), Some("n0")));
        m.tags.insert("top".to_owned(), "n1".to_owned());
        let bundle = fx.base.join("opaque-root.bundle");
        crate::bundle::write_bundle(&bundle, Compression::Zstd, &m, &[("n0", &l0), ("n1", &l1)]);

        let store = fx.store();
        let dir = fx.dir("opaque");
        import_bundle(&store, &bundle, "o", &dir);
        assert_same(&t1, &dir, "the node with an opaque root");
        let (node, changes) = store.show("o", "HEAD").expect("show");
        assert_eq!(node.id.as_str(), "n1");
        let changed: Vec<String> = changes
            .iter()
            .map(|c| format!("{:?} {}", c.kind, c.path.display()))
            .collect();
        assert_eq!(
            changed,
            ["Removed a", "Added b", "Removed d", "Removed d/x"]
        );
        store.checkout("o", "HEAD~1").expect("checkout the base");
        assert_same(&t0, &dir, "the base");
        store
            .checkout("o", "top")
            .expect("checkout the tagged node");
        assert_same(
            &t1,
            &dir,
            &format!("{:?}: the node with an opaque root, again", fx.kind),
        );
        store.remove_env("o").expect("destroy");
    }
}

/// One step of a random editing session on a working tree.
#[derive(Debug, Clone)]
enum Op {
    Write(usize, u8),
    Append(usize),
    Remove(usize),
    Mkdir(usize),
    Chmod(usize, u32),
    Rename(usize, usize),
    Symlink(usize, usize),
    Hardlink(usize, usize),
    Commit,
}

/// A small namespace so that operations collide: files replace directories, directories are
/// deleted and recreated (overlay opaque directories), renames move whole subtrees.
const PATHS: [&str; 8] = ["a", "b", "a/x", "a/y", "a/x/deep", "b/z", "c", "a/y/w"];

/// Where proptest keeps the cases it once found failing: `conformance.proptest-regressions`
/// next to this file. The default (`SourceParallel`) stops at the directory holding the
/// binary's `main.rs` and would read `tests/proptest-regressions/conformance.txt` instead.
fn regressions() -> Option<Box<dyn proptest::test_runner::FailurePersistence>> {
    Some(Box::new(
        proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
    ))
}

fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let p = 0..PATHS.len();
    prop_oneof![
        (p.clone(), any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
        p.clone().prop_map(Op::Append),
        p.clone().prop_map(Op::Remove),
        p.clone().prop_map(Op::Mkdir),
        (
            p.clone(),
            prop::sample::select(vec![0o644, 0o4755, 0o600, 0o1777, 0o2750])
        )
            .prop_map(|(i, m)| Op::Chmod(i, m)),
        (p.clone(), p.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (p.clone(), p.clone()).prop_map(|(a, b)| Op::Symlink(a, b)),
        (p.clone(), p).prop_map(|(a, b)| Op::Hardlink(a, b)),
        Just(Op::Commit),
        Just(Op::Commit),
    ]
}

/// Apply an operation; failures (missing parents, wrong types) are part of the game.
fn apply(root: &Path, op: &Op) {
    use std::os::unix::fs::PermissionsExt;
    let p = |i: usize| root.join(PATHS[i]);
    let _ = match op {
        Op::Write(i, b) => {
            let path = p(*i);
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::write(&path, vec![*b; (*b as usize) * 37 % 5000])
        }
        Op::Append(i) => std::fs::OpenOptions::new()
            .append(true)
            .open(p(*i))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"more\n")),
        Op::Remove(i) => {
            let path = p(*i);
            if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            }
        }
        Op::Mkdir(i) => std::fs::create_dir_all(p(*i)),
        Op::Chmod(i, m) => {
            if p(*i).is_symlink() {
                Ok(())
            } else {
                std::fs::set_permissions(p(*i), std::fs::Permissions::from_mode(*m))
            }
        }
        Op::Rename(a, b) => std::fs::rename(p(*a), p(*b)),
        Op::Symlink(a, b) => std::os::unix::fs::symlink(PATHS[*a], p(*b)),
        Op::Hardlink(a, b) => std::fs::hard_link(p(*a), p(*b)),
        Op::Commit => Ok(()),
    };
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, failure_persistence: regressions(), ..Default::default() })]

    /// After any editing session with commits in between, checking out each node gives
    /// back exactly the tree that was committed (every backend).
    #[test]
    fn random_sessions_check_out_exactly(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        for fx in fixtures("random_sessions_check_out_exactly") {
            let store = fx.store();
            let dir = fx.dir("rnd");
            let refs = fx.base.join("rndrefs");
            let _ = std::fs::remove_dir_all(&refs);
            let st = store.create_env("rnd", Some(&dir), Source::Empty, "empty").expect("create");
            let mut nodes = vec![(st.head.clone(), refs.join("0"))];
            snapshot_copy(&dir, &nodes[0].1);
            for (i, op) in ops.iter().chain(std::iter::once(&Op::Commit)).enumerate() {
                if let Op::Commit = op {
                    let id = commit(&store, "rnd", &format!("step {i}"));
                    let r = refs.join((i + 1).to_string());
                    snapshot_copy(&dir, &r);
                    nodes.push((id, r));
                } else {
                    apply(&dir, op);
                }
            }
            for (id, r) in nodes.iter().rev().chain(nodes.iter()) {
                store.checkout("rnd", id).expect("checkout");
                assert_same(r, &dir, &format!("{:?} node {id} after {ops:?}", fx.kind));
            }
            store.remove_env("rnd").expect("destroy");
        }
    }
}

/// A directory deleted and recreated hides what was below it once, and later layers that
/// add to it do not hide what the earlier layers added (overlay opaque directories).
#[test]
fn recreated_directory_keeps_later_additions() {
    for fx in fixtures("recreated_directory_keeps_later_additions") {
        let store = fx.store();
        let src = fx.base.join("odsrc");
        write(&src.join("a/old"), "old");
        let dir = fx.dir("od");
        store
            .create_env("od", Some(&dir), Source::Dir(src), "initial")
            .expect("create");
        std::fs::remove_dir_all(dir.join("a")).expect("rm");
        write(&dir.join("a/new1"), "1");
        commit(&store, "od", "recreated");
        write(&dir.join("a/new2"), "2");
        commit(&store, "od", "added");
        store.checkout("od", "HEAD").expect("checkout");
        let mut names: Vec<String> = std::fs::read_dir(dir.join("a"))
            .expect("readdir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["new1", "new2"], "{:?}", fx.kind);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 10, failure_persistence: regressions(), ..Default::default() })]

    /// Fidelity: a random tree (every file type, setuid/setgid/sticky, owners, xattrs, sparse
    /// files, hardlinks, dangling symlinks, directory mtimes) survives create → commit →
    /// checkout → export → import exactly, on every backend.
    #[test]
    fn random_trees_survive_the_round_trip(spec in agentbox_testkit::tree_gen::tree_spec()) {
        for fx in fixtures("random_trees_survive_the_round_trip") {
            let src = fx.base.join("fidsrc");
            let _ = std::fs::remove_dir_all(&src);
            agentbox_testkit::tree_gen::materialize(&spec, &src);
            let store = fx.store();
            let dir = fx.dir("fid");
            store.create_env("fid", Some(&dir), Source::Dir(src.clone()), "tree").expect("create");
            assert_same(&src, &dir, "created");
            write(&dir.join("extra-file"), "x");
            commit(&store, "fid", "extra");
            store.checkout("fid", "HEAD~1").expect("checkout");
            assert_same(&src, &dir, "checked out");
            let bundle = fx.base.join("fid.bundle");
            for kind in ["snapshot", "history"] {
                agentbox_store::transfer::export(
                    &store, "fid", "HEAD", kind.parse().expect("kind"),
                    "zstd".parse().expect("zstd"), &bundle,
                ).expect("export");
                let other = Store::open_or_init(&fx.base.join(format!("fid-{kind}")), Some(fx.kind))
                    .expect("store");
                let d2 = fx.dir(&format!("fid-{kind}"));
                agentbox_store::transfer::import(
                    &other,
                    bundle.to_str().expect("utf8"),
                    "back",
                    &d2,
                    agentbox_store::transfer::ImportOptions {
                        allow_devices: true,
                        allow_setuid: true,
                        max_size: None,
                    },
                )
                    .expect("import");
                // The tree's trusted.* xattrs (made as root) travel in the bundle and are
                // never applied by an import; everything else comes back exactly.
                let diffs: Vec<String> = agentbox_store::fsops::compare_exact(&src, &d2)
                    .expect("compare")
                    .into_iter()
                    .filter(|d| !d.ends_with("xattrs differ: -trusted.t0"))
                    .collect();
                assert!(diffs.is_empty(), "{kind}: trees differ:\n{}", diffs.join("\n"));
                other.remove_env("back").expect("destroy");
            }
            store.remove_env("fid").expect("destroy");
        }
    }
}

/// GC runs while another environment commits: nothing the committer made is freed.
#[test]
fn gc_is_safe_during_commits() {
    for fx in fixtures("gc_is_safe_during_commits") {
        let store = fx.store();
        let d1 = fx.dir("busy");
        store
            .create_env("busy", Some(&d1), Source::Empty, "e")
            .expect("create");
        let d2 = fx.dir("idle");
        store
            .create_env("idle", Some(&d2), Source::Empty, "e")
            .expect("create");
        for i in 0..5 {
            write(&d2.join("f"), &i.to_string());
            commit(&store, "idle", "x");
        }
        let root = store.root().to_owned();
        let committer = {
            let root = root.clone();
            let d1 = d1.clone();
            std::thread::spawn(move || {
                let store = Store::open(&root).expect("open");
                for i in 0..25 {
                    write(&d1.join(format!("f{i}")), &i.to_string());
                    commit(&store, "busy", &format!("c{i}"));
                }
            })
        };
        let collector = std::thread::spawn(move || {
            let store = Store::open(&root).expect("open");
            for _ in 0..10 {
                // Garbage to collect: thin the other environment's history.
                store.retain("idle", 1).expect("retain");
                store.gc().expect("gc");
            }
        });
        committer.join().expect("committer");
        collector.join().expect("collector");
        store.gc().expect("final gc");
        let report = store.fsck(false).expect("fsck");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let log = store.log("busy").expect("log");
        assert_eq!(log.len(), 26, "root and 25 commits");
        for node in log.iter().rev() {
            store.checkout("busy", &node.id).expect("checkout");
        }
        assert_eq!(read(&d1.join("f24")), "24");
    }
}

/// A commit never lets a later write change what it committed: not through a file a
/// process kept open across the commit (on `layers` the working files cannot then be
/// handed to the layer, and are copied), nor through a file opened after it (on `layers`
/// the handed-over files are no longer the working ones).
#[test]
fn writes_after_a_commit_leave_it_alone() {
    use std::io::Write as _;
    for fx in fixtures("writes_after_a_commit_leave_it_alone") {
        let store = fx.store();
        let src = fx.base.join("src");
        write(&src.join("kept.txt"), "base");
        let dir = fx.dir("w");
        store
            .create_env("w", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");

        // Held open across the commit.
        let mut held = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("kept.txt"))
            .expect("open");
        held.write_all(b" one").expect("write");
        let n1 = commit(&store, "w", "held open");
        held.write_all(b" two").expect("write after the commit");
        drop(held);

        // Nothing open during the commit, written again afterwards.
        write(&dir.join("sub/later.txt"), "first");
        let n2 = commit(&store, "w", "nothing open");
        write(&dir.join("sub/later.txt"), "second");
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("kept.txt"))
            .expect("open")
            .write_all(b" three")
            .expect("write");
        assert_eq!(read(&dir.join("kept.txt")), "base one two three");
        let n3 = commit(&store, "w", "after");

        store.checkout("w", n1.as_str()).expect("checkout n1");
        assert_eq!(read(&dir.join("kept.txt")), "base one", "{:?}", fx.kind);
        assert!(!dir.join("sub").exists(), "{:?}", fx.kind);
        store.checkout("w", n2.as_str()).expect("checkout n2");
        assert_eq!(read(&dir.join("kept.txt")), "base one two", "{:?}", fx.kind);
        assert_eq!(read(&dir.join("sub/later.txt")), "first", "{:?}", fx.kind);
        store.checkout("w", n3.as_str()).expect("checkout n3");
        assert_eq!(read(&dir.join("kept.txt")), "base one two three");
        assert_eq!(read(&dir.join("sub/later.txt")), "second", "{:?}", fx.kind);
        store.remove_env("w").expect("destroy");
    }
}

/// Nor through another mount of the same tree (what a container's volume of the
/// directory is): the unmount of a commit's handoff does not see such a mount, so on
/// `layers` a tree mounted anywhere else is never handed over (its changes are copied),
/// whether a file is open through that mount or not.
#[test]
fn writes_through_another_mount_of_the_tree_leave_a_commit_alone() {
    use std::io::Write as _;
    for fx in fixtures("writes_through_another_mount_of_the_tree_leave_a_commit_alone") {
        let store = fx.store();
        let src = fx.base.join("src");
        write(&src.join("a.txt"), "base");
        let dir = fx.dir("w");
        store
            .create_env("w", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");
        let other = fx.base.join("volume");
        std::fs::create_dir_all(&other).expect("mkdir");
        rustix::mount::mount_bind(&dir, &other).expect("bind the tree elsewhere");

        // A file open for writing through the other mount during the commit.
        write(&dir.join("a.txt"), "one");
        let mut held = std::fs::OpenOptions::new()
            .append(true)
            .open(other.join("a.txt"))
            .expect("open through the other mount");
        let n1 = commit(&store, "w", "written elsewhere");
        held.write_all(b" two").expect("write after the commit");
        drop(held);

        // Nothing open anywhere during the commit, written through the other mount after
        // it: that mount still shows the live tree.
        write(&dir.join("a.txt"), "three");
        let n2 = commit(&store, "w", "idle elsewhere");
        std::fs::write(other.join("a.txt"), "four").expect("write through the other mount");
        assert_eq!(read(&dir.join("a.txt")), "four", "{:?}", fx.kind);

        store.checkout("w", n1.as_str()).expect("checkout n1");
        assert_eq!(read(&dir.join("a.txt")), "one", "{:?}", fx.kind);
        store.checkout("w", n2.as_str()).expect("checkout n2");
        assert_eq!(read(&dir.join("a.txt")), "three", "{:?}", fx.kind);
        let _ = rustix::mount::unmount(&other, rustix::mount::UnmountFlags::DETACH);
        store.remove_env("w").expect("destroy");
    }
}

/// What mount propagation copied of the tree into another namespace (a service's private
/// namespace on a systemd host, a slave of the host's mounts) goes away with the unmount,
/// so it does not keep a `layers` commit from handing the files over; a bind mount of the
/// tree elsewhere does.
#[test]
fn propagated_copies_of_the_tree_do_not_stop_a_handoff() {
    for fx in fixtures("propagated_copies_of_the_tree_do_not_stop_a_handoff") {
        if fx.kind != agentbox_store::BackendKind::Layers {
            continue;
        }
        let store = fx.store();
        let shared = fx.base.join("shared");
        std::fs::create_dir_all(&shared).expect("mkdir");
        rustix::mount::mount_bind(&shared, &shared).expect("bind");
        rustix::mount::mount_change(&shared, rustix::mount::MountPropagationFlags::SHARED)
            .expect("make shared");
        // A namespace whose mounts are slaves of ours, made before the tree is mounted.
        let mut slave = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "sleep", "60"])
            .spawn()
            .expect("unshare (util-linux)");
        let src = fx.base.join("src");
        write(&src.join("a.txt"), "base");
        let dir = shared.join("w");
        // Until the namespace exists: its copy of the tree is what this test is about.
        let ns = format!("/proc/{}/ns/mnt", slave.id());
        while std::fs::read_link(&ns).ok() == std::fs::read_link("/proc/self/ns/mnt").ok() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        store
            .create_env("w", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");
        let copy =
            std::fs::read_to_string(format!("/proc/{}/mountinfo", slave.id())).expect("mountinfo");
        assert!(
            copy.lines()
                .any(|l| l.contains(&format!(" {} ", dir.display()))),
            "the tree was propagated into the other namespace: {copy}"
        );
        let upper = store.root().join("envs/w/work/upper");
        write(&dir.join("a.txt"), "one");
        let n1 = commit(&store, "w", "handed over");
        assert_eq!(
            std::fs::read_dir(&upper).expect("upper").count(),
            0,
            "the changes went to the layer, the upper directory starts empty"
        );
        // An independent mount of the tree: copied instead.
        let other = fx.base.join("volume");
        std::fs::create_dir_all(&other).expect("mkdir");
        rustix::mount::mount_bind(&dir, &other).expect("bind the tree elsewhere");
        write(&dir.join("a.txt"), "two");
        commit(&store, "w", "copied");
        assert!(
            std::fs::read_dir(&upper).expect("upper").count() > 0,
            "a tree mounted elsewhere keeps its upper directory"
        );
        let _ = rustix::mount::unmount(&other, rustix::mount::UnmountFlags::DETACH);
        store.checkout("w", n1.as_str()).expect("checkout");
        assert_eq!(read(&dir.join("a.txt")), "one");
        let _ = slave.kill();
        let _ = slave.wait();
        store.remove_env("w").expect("destroy");
        let _ = rustix::mount::unmount(&shared, rustix::mount::UnmountFlags::DETACH);
    }
}
