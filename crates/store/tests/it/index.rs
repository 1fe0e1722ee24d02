//! The metadata index (id fan-out, branch tips, intent markers): migration of a store made
//! without it, what `fsck` finds when it disagrees with the node files, and the reconcile
//! pass an intent marker left by a dead operation triggers. Every backend (tier 2).

use std::collections::BTreeSet;
use std::path::Path;

use agentbox_core::id::NodeId;
use agentbox_store::leftovers::LeftoverKind;
use agentbox_store::{Source, Store};

use crate::common::{commit, fixtures, write};

/// An environment `proj` with a branch: root → a → b (HEAD after checkout of `a`: c, a
/// second line), a tag, and a fork `other` of `a` with a commit of its own.
struct Shaped {
    root: NodeId,
    a: NodeId,
    b: NodeId,
    c: NodeId,
    forked: NodeId,
}

fn shaped(store: &Store, base: &Path) -> Shaped {
    let src = base.join("src");
    write(&src.join("f"), "root");
    let dir = base.join("dirs/proj");
    let root = store
        .create_env("proj", Some(&dir), Source::Dir(src), "root")
        .expect("create")
        .head;
    write(&dir.join("f"), "a");
    let a = commit(store, "proj", "a");
    write(&dir.join("f"), "b");
    let b = commit(store, "proj", "b");
    store.checkout("proj", a.as_str()).expect("checkout a");
    write(&dir.join("f"), "c");
    let c = commit(store, "proj", "c");
    store.set_tag("proj", "v1", root.as_str()).expect("tag");
    let odir = base.join("dirs/other");
    store
        .fork_env("proj", a.as_str(), "other", Some(&odir))
        .expect("fork");
    write(&odir.join("g"), "g");
    let forked = commit(store, "other", "forked");
    Shaped {
        root,
        a,
        b,
        c,
        forked,
    }
}

fn history_ids(store: &Store, env: &str) -> BTreeSet<String> {
    store
        .history(env)
        .expect("history")
        .nodes
        .into_iter()
        .map(|n| n.id.into_string())
        .collect()
}

fn ids(v: &[&NodeId]) -> BTreeSet<String> {
    v.iter().map(|n| n.as_str().to_owned()).collect()
}

/// Make `root` look like a store the previous version wrote: format 1, no index, no
/// intent markers, no tips in any env.json.
fn downgrade(root: &Path) {
    std::fs::remove_dir_all(root.join("index")).expect("rm index");
    let _ = std::fs::remove_dir_all(root.join("inflight"));
    let config = root.join("store.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).expect("read")).expect("json");
    v["format"] = 1.into();
    std::fs::write(&config, serde_json::to_vec(&v).expect("ser")).expect("write");
    for env in std::fs::read_dir(root.join("envs")).expect("envs") {
        let path = env.expect("entry").path().join("env.json");
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        v.as_object_mut().expect("object").remove("tips");
        std::fs::write(&path, serde_json::to_vec(&v).expect("ser")).expect("write");
    }
}

fn format_of(root: &Path) -> u64 {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("store.json")).expect("read"))
            .expect("json");
    v["format"].as_u64().expect("format")
}

#[test]
fn history_is_the_ancestors_of_tips_head_and_tags() {
    for fx in fixtures("history_is_the_ancestors_of_tips_head_and_tags") {
        let store = fx.store();
        let s = shaped(&store, &fx.base);
        assert_eq!(
            history_ids(&store, "proj"),
            ids(&[&s.root, &s.a, &s.b, &s.c]),
            "{:?}: the line left by the checkout (b) stays in the history",
            fx.kind
        );
        // The fork's history: its own node and the ancestors it was forked from.
        assert_eq!(
            history_ids(&store, "other"),
            ids(&[&s.root, &s.a, &s.forked])
        );
        let st = store.env("proj").expect("env");
        assert_eq!(st.tips, ids(&[&s.b, &s.c]), "{:?}", fx.kind);
        // Deleting a branch tip hands its place to its parent: still in the history.
        store.delete_node("proj", s.b.as_str()).expect("delete b");
        assert_eq!(history_ids(&store, "proj"), ids(&[&s.root, &s.a, &s.c]));
        assert_eq!(
            store.env("proj").expect("env").tips,
            ids(&[&s.a, &s.c]),
            "{:?}",
            fx.kind
        );
        // `log -n`: HEAD first, as many as asked.
        let last: Vec<NodeId> = store
            .log_limit("proj", Some(2))
            .expect("log")
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert_eq!(last, vec![s.c.clone(), s.a.clone()]);
        let fsck = store.fsck(false).expect("fsck");
        assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
    }
}

#[test]
fn a_store_of_the_previous_format_is_migrated_on_open() {
    for fx in fixtures("a_store_of_the_previous_format_is_migrated_on_open") {
        let root = fx.base.join("store");
        let (s, before_proj, before_other) = {
            let store = fx.store();
            let s = shaped(&store, &fx.base);
            let p = history_ids(&store, "proj");
            let o = history_ids(&store, "other");
            (s, p, o)
        };
        downgrade(&root);
        // As the previous version left it, fsck says the index is to be built (repairable).
        let old = Store::open_unreconciled(&root).expect("open format 1");
        let report = old.fsck(false).expect("fsck");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.repairable && p.message.contains("not built")),
            "{:?}",
            report.problems
        );
        // Lookups are right before the migration too (from the node files).
        assert_eq!(history_ids(&old, "proj"), before_proj);
        assert_eq!(
            old.resolve_node(&s.c.as_str()[..6]).expect("prefix"),
            s.c,
            "{:?}",
            fx.kind
        );
        drop(old);

        let store = Store::open(&root).expect("open migrates");
        assert_eq!(format_of(&root), 2, "{:?}", fx.kind);
        for n in [&s.root, &s.a, &s.b, &s.c, &s.forked] {
            assert!(
                root.join("index/ids")
                    .join(&n.as_str()[..2])
                    .join(n.as_str())
                    .exists(),
                "{:?}: {n} indexed",
                fx.kind
            );
            assert_eq!(
                store.resolve_node(&n.as_str()[..8]).expect("prefix"),
                *n,
                "{:?}",
                fx.kind
            );
        }
        assert_eq!(store.env("proj").expect("env").tips, ids(&[&s.b, &s.c]));
        assert_eq!(store.env("other").expect("env").tips, ids(&[&s.forked]));
        assert_eq!(history_ids(&store, "proj"), before_proj);
        assert_eq!(history_ids(&store, "other"), before_other);
        let fsck = store.fsck(false).expect("fsck");
        assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
        // And it keeps working as a store of the new format.
        write(&fx.base.join("dirs/proj/f"), "d");
        let d = commit(&store, "proj", "d");
        assert_eq!(store.resolve_node(&d.as_str()[..8]).expect("prefix"), d);
    }
}

#[test]
fn fsck_finds_and_repairs_where_the_index_and_the_nodes_disagree() {
    for fx in fixtures("fsck_finds_and_repairs_where_the_index_and_the_nodes_disagree") {
        let root = fx.base.join("store");
        let store = fx.store();
        let s = shaped(&store, &fx.base);
        // A node without its fan-out entry: a prefix no longer finds it.
        let entry = root
            .join("index/ids")
            .join(&s.b.as_str()[..2])
            .join(s.b.as_str());
        std::fs::remove_file(&entry).expect("rm entry");
        assert!(store.resolve_node(&s.b.as_str()[..8]).is_err());
        // Tips that lost a branch: its line drops out of the history.
        let env_json = root.join("envs/proj/env.json");
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&env_json).expect("read")).expect("json");
        v["tips"] = serde_json::json!([s.c.as_str()]);
        std::fs::write(&env_json, serde_json::to_vec(&v).expect("ser")).expect("write");
        assert!(!history_ids(&store, "proj").contains(s.b.as_str()));

        let report = store.fsck(false).expect("fsck");
        let messages: Vec<&str> = report.problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains(s.b.as_str()) && m.contains("id index")),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains(s.b.as_str()) && m.contains("tips")),
            "{messages:?}"
        );
        assert!(report.problems.iter().all(|p| p.repairable));

        let repaired = store.fsck(true).expect("repair");
        assert!(repaired.problems.is_empty(), "{:?}", repaired.problems);
        assert_eq!(store.resolve_node(&s.b.as_str()[..8]).expect("prefix"), s.b);
        assert!(history_ids(&store, "proj").contains(s.b.as_str()));

        // An entry naming no node (a write stopped between the two): listed, pruned.
        let ghost = "00aa00aa00aa00aa";
        std::fs::write(root.join("index/ids/00").join(ghost), b"").expect("ghost");
        let report = store.fsck(false).expect("fsck");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert!(report
            .leftovers
            .iter()
            .any(|l| l.kind == LeftoverKind::StaleIndexEntry));
        store.prune_leftovers(false).expect("prune");
        assert!(!root.join("index/ids/00").join(ghost).exists());
    }
}

#[test]
fn an_intent_marker_left_by_a_dead_operation_makes_open_reconcile() {
    for fx in fixtures("an_intent_marker_left_by_a_dead_operation_makes_open_reconcile") {
        let root = fx.base.join("store");
        let store = fx.store();
        let s = shaped(&store, &fx.base);
        drop(store);
        // A half-made node: the node file of a commit that never reached its HEAD.
        let mut half: serde_json::Value = serde_json::from_slice(
            &std::fs::read(root.join("nodes").join(format!("{}.json", s.c))).expect("read"),
        )
        .expect("json");
        let ghost = "0123456789abcdef";
        half["id"] = ghost.into();
        half["seq"] = 99.into();
        let path = root.join("nodes").join(format!("{ghost}.json"));
        std::fs::write(&path, serde_json::to_vec(&half).expect("ser")).expect("write");
        // No marker: nothing says an operation died, so opening does not look.
        drop(Store::open(&root).expect("open"));
        assert!(path.exists(), "{:?}: opening without a marker", fx.kind);
        // A marker of a process that is gone: the full pass runs and clears it.
        let marker = root.join("inflight/1-deadbeefdeadbeef");
        std::fs::write(&marker, b"").expect("marker");
        let store = Store::open(&root).expect("open");
        assert!(!path.exists(), "{:?}: the full pass removed it", fx.kind);
        assert!(!marker.exists(), "{:?}: marker cleared", fx.kind);
        // Markers of finished operations do not stay behind.
        write(&fx.base.join("dirs/proj/f"), "e");
        commit(&store, "proj", "e");
        assert_eq!(
            std::fs::read_dir(root.join("inflight"))
                .expect("inflight")
                .count(),
            0,
            "{:?}",
            fx.kind
        );
    }
}
