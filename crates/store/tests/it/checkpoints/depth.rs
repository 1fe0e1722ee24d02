//! Chains at the maximum depth: derives and commits past it make complete or compacted
//! layers, and every node still shows what it did.

use super::*;

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
