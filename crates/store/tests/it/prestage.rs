//! Prestaged copies of a box's files (tier 2, every backend): a commit takes a copy only
//! when it is exactly the file the commit would copy, never anything a box reached through
//! a symlink, and an area left behind is found by `fsck` and removed by `prune`.

use std::path::Path;

use agentbox_store::backend::prestage::Staged;
use agentbox_store::fsops::Kind;
use agentbox_store::{Source, Store};

use crate::common::{commit, fixtures, write, Fixture};

/// Box `bx` made from a directory holding `workspace/README`: its upper directory.
fn new_box(fx: &Fixture, store: &Store) -> std::path::PathBuf {
    let src = fx.base.join("src");
    write(&src.join("workspace/README"), "readme");
    store
        .create_env("bx", None, Source::Dir(src), "initial")
        .expect("create");
    store.box_layers("bx").expect("box layers").upper
}

/// Past [`agentbox_store::backend::prestage::SETTLED`]: the files written before count
/// as settled.
fn settle() {
    std::thread::sleep(agentbox_store::backend::prestage::SETTLED * 2);
}

/// The regular files and symlinks of HEAD's tree below `workspace/`: path → content (a
/// symlink's target), with each file's mode.
fn head_files(store: &Store) -> std::collections::BTreeMap<String, (String, u32)> {
    let head = store
        .node(store.resolve("bx", "HEAD").expect("HEAD").as_str())
        .expect("node");
    let tree = store.node_tree(&head).expect("tree");
    tree.entries
        .values()
        .filter(|e| e.rel.starts_with("workspace") && e.meta.kind != Kind::Dir)
        .map(|e| {
            let content = match e.meta.kind {
                Kind::Symlink => e
                    .meta
                    .target
                    .as_ref()
                    .map(|t| t.display().to_string())
                    .unwrap_or_default(),
                _ => std::fs::read_to_string(&e.src).expect("read a layer's file"),
            };
            (e.rel.display().to_string(), (content, e.meta.perm))
        })
        .collect()
}

/// The files of every layer directory of the store holding `needle`.
fn layers_holding(store_dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![store_dir.join("layers")];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                todo.push(e.path());
            } else if kind.is_file()
                && std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(needle))
            {
                found.push(e.path().display().to_string());
            }
        }
    }
    found
}

/// A command wrote files, the copies were made, then it rewrote, removed, renamed and
/// chmodded some of them: offered every copy as valid (a watcher that missed all of it),
/// the commit still takes only the copies that are exactly the files at its time, and the
/// node is the tree at the end.
#[test]
fn a_commit_takes_only_the_copies_that_are_exactly_the_files() {
    for fx in fixtures("a_commit_takes_only_the_copies_that_are_exactly_the_files") {
        let store = fx.store();
        let upper = new_box(&fx, &store);
        let w = upper.join("workspace");
        for name in [
            "kept",
            "kept2",
            "rewritten",
            "removed",
            "renamed",
            "chmodded",
        ] {
            write(&w.join("d").join(name), &format!("{name} v1"));
        }
        // A file of HEAD's layer, written again.
        write(&w.join("README"), "readme v2");
        settle();
        let mut pre = store.prestage("bx").expect("prestage");
        for name in [
            "kept",
            "kept2",
            "rewritten",
            "removed",
            "renamed",
            "chmodded",
        ] {
            let staged = pre
                .stage(&Path::new("workspace/d").join(name), 1)
                .expect("stage");
            assert!(matches!(staged, Staged::Copied(_)), "{name}: {staged:?}");
        }
        let staged = pre.stage(Path::new("workspace/README"), 1).expect("stage");
        assert!(matches!(staged, Staged::Copied(_)), "README: {staged:?}");
        assert_eq!(
            pre.stage(Path::new("workspace/d"), 1).expect("stage"),
            Staged::Directory
        );
        write(&w.join("d/rewritten"), "rewritten v2");
        std::fs::remove_file(w.join("d/removed")).expect("rm");
        std::fs::rename(w.join("d/renamed"), w.join("d/renamed2")).expect("mv");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(w.join("d/chmodded"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        write(&w.join("d/new"), "made after the copies");
        let offer = pre.offer(|_, _| true);
        commit(&store, "bx", "the end");
        assert_eq!(
            offer.taken(),
            3,
            "{:?}: kept, kept2 and README only",
            fx.kind
        );
        drop(offer);
        let files = head_files(&store);
        let want: Vec<(&str, &str, u32)> = vec![
            ("workspace/README", "readme v2", 0o644),
            ("workspace/d/chmodded", "chmodded v1", 0o600),
            ("workspace/d/kept", "kept v1", 0o644),
            ("workspace/d/kept2", "kept2 v1", 0o644),
            ("workspace/d/new", "made after the copies", 0o644),
            ("workspace/d/renamed2", "renamed v1", 0o644),
            ("workspace/d/rewritten", "rewritten v2", 0o644),
        ];
        let got: Vec<(&str, &str, u32)> = files
            .iter()
            .map(|(p, (c, m))| (p.as_str(), c.as_str(), *m))
            .collect();
        assert_eq!(got, want, "{:?}", fx.kind);
        // Nothing of the copies is left in the store.
        let left: Vec<_> = std::fs::read_dir(fx.base.join("store/layers"))
            .expect("layers")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{:?}: {left:?}", fx.kind);
    }
}

/// The box swaps the directory of a copied file for a symlink to a host directory after
/// the copy and before its commit: nothing of the host's file reaches the layer, whether
/// the file is copied again (as the copier does on the event) or the commit runs. The
/// control: a copy of the same path that follows symlinks reads the host's file.
#[test]
fn a_directory_swapped_for_a_symlink_after_prestaging_brings_nothing_of_the_hosts() {
    for fx in
        fixtures("a_directory_swapped_for_a_symlink_after_prestaging_brings_nothing_of_the_hosts")
    {
        let store = fx.store();
        let upper = new_box(&fx, &store);
        let host = fx.base.join("host/d");
        write(&host.join("f.txt"), "HOST SECRET");
        write(&upper.join("workspace/d/f.txt"), "box's own");
        settle();
        let mut pre = store.prestage("bx").expect("prestage");
        let rel = Path::new("workspace/d/f.txt");
        assert!(matches!(
            pre.stage(rel, 1).expect("stage"),
            Staged::Copied(_)
        ));
        std::fs::remove_dir_all(upper.join("workspace/d")).expect("rm");
        std::os::unix::fs::symlink(&host, upper.join("workspace/d")).expect("symlink");
        settle();
        assert_eq!(pre.stage(rel, 2).expect("stage again"), Staged::Skipped);
        let offer = pre.offer(|_, _| true);
        commit(&store, "bx", "swapped");
        drop(offer);
        let store_dir = fx.base.join("store");
        assert_eq!(
            layers_holding(&store_dir, "HOST SECRET"),
            Vec::<String>::new(),
            "{:?}: the host's file reached the store",
            fx.kind
        );
        let files = head_files(&store);
        assert_eq!(
            files.get("workspace/d").map(|(t, _)| t.as_str()),
            Some(host.to_str().expect("utf-8")),
            "{:?}: {files:?}",
            fx.kind
        );
        // The control: the same path copied without staying beneath the upper directory.
        let control = fx.base.join("control");
        let entry = agentbox_store::fsops::Entry {
            rel: rel.to_owned(),
            src: upper.join(rel),
            meta: agentbox_store::fsops::scan::read_meta(&upper.join(rel)).expect("meta"),
        };
        agentbox_store::fsops::copy::copy_entry(&entry, &control, &Default::default())
            .expect("control copy");
        assert_eq!(
            std::fs::read_to_string(&control).expect("read"),
            "HOST SECRET",
            "the control did not follow the symlink"
        );
    }
}

/// An area left behind by a process killed before it offered or dropped it goes with the
/// next open of the store (which finishes what a crash left, see `reconcile`); one
/// found without that (its crash marker lost) is a temporary layer to `fsck`, and `prune`
/// removes it.
#[test]
fn a_prestage_left_behind_is_cleaned_and_found_by_fsck_and_removed_by_prune() {
    for fx in fixtures("a_prestage_left_behind_is_cleaned_and_found_by_fsck_and_removed_by_prune") {
        let store_dir = fx.base.join("store");
        let areas = || -> Vec<String> {
            std::fs::read_dir(store_dir.join("layers"))
                .expect("layers")
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tmp-prestage-"))
                .collect()
        };
        assert!(
            leave_a_prestage_behind(&fx),
            "{:?}: the child made its copies",
            fx.kind
        );
        assert_eq!(areas().len(), 1, "{:?}", fx.kind);
        let store = fx.store();
        assert_eq!(
            areas(),
            Vec::<String>::new(),
            "{:?}: kept by the next open",
            fx.kind
        );
        // Without the crash's marker: a leftover for fsck and prune.
        let area = store_dir.join("layers/.tmp-prestage-0123456789abcdef");
        write(&area.join("0"), "a copy");
        let report = store.fsck(false).expect("fsck");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.path.to_string_lossy().contains(".tmp-prestage-")),
            "{:?}: {report:?}",
            fx.kind
        );
        let pruned = store.prune_leftovers(false).expect("prune");
        assert!(pruned.busy.is_none(), "{pruned:?}");
        assert_eq!(areas(), Vec::<String>::new(), "{:?}: {pruned:?}", fx.kind);
    }
}

/// Run this test binary again as a child that makes a prestage of box `bx` of `fx`'s store
/// with one copy and exits without dropping it (see `prestage_child` below); whether it
/// succeeded.
fn leave_a_prestage_behind(fx: &Fixture) -> bool {
    let store = fx.store();
    let upper = new_box(fx, &store);
    write(&upper.join("workspace/f"), "copied");
    settle();
    drop(store);
    let exe = std::env::current_exe().expect("exe");
    std::process::Command::new(exe)
        .args(["--exact", "prestage::prestage_child", "--nocapture"])
        .env("PRESTAGE_CHILD_STORE", fx.base.join("store"))
        .env("PRESTAGE_CHILD_KIND", format!("{:?}", fx.kind))
        .status()
        .is_ok_and(|s| s.success())
}

/// The child of `leave_a_prestage_behind` (does nothing when run on its own).
#[test]
fn prestage_child() {
    let Some(dir) = std::env::var_os("PRESTAGE_CHILD_STORE") else {
        return;
    };
    let kind = match std::env::var("PRESTAGE_CHILD_KIND").as_deref() {
        Ok("Btrfs") => agentbox_store::BackendKind::Btrfs,
        _ => agentbox_store::BackendKind::Layers,
    };
    let store = Store::open_or_init(Path::new(&dir), Some(kind)).expect("open");
    let mut pre = store.prestage("bx").expect("prestage");
    assert!(matches!(
        pre.stage(Path::new("workspace/f"), 1).expect("stage"),
        Staged::Copied(_)
    ));
    // A crash: no destructor runs.
    std::process::exit(0);
}
