//! Derive and flatten killed at every failpoint, and what recovery leaves.

use super::*;

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
        .args(["checkpoints::kills::kill_target", "--exact", "--nocapture"])
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
