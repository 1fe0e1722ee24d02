//! A box's chain (layers over a base it hides paths of): what its root lists, and its
//! compaction.

use super::*;

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
