//! Commits and checkouts, refs and tags, forks, retention, and history bundles (including
//! crafted overlay markers) on every backend.

use super::*;

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
