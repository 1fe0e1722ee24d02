//! Derive and flatten on every backend, refs keeping their nodes alive, and the overlay
//! markers of a box's chain through both.

use super::*;

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
