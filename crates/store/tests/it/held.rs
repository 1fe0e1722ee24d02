//! Environments whose trees a provider holds (`agentbox_store::held`): the store keeps their
//! history and never touches a tree; freeing a held layer queues its object for the
//! provider. Tier 0: a held environment needs no mount.
#![allow(clippy::unwrap_used)]

use agentbox_store::{CommitOpts, Error, Held, Store};
use agentbox_testkit::TempHome;

fn held(object: &str) -> Held {
    Held {
        by: "docker".into(),
        object: object.into(),
    }
}

fn opts(message: &str) -> CommitOpts {
    CommitOpts {
        message: message.into(),
        command: Some("make".into()),
        metadata: Default::default(),
    }
}

fn store(home: &TempHome) -> Store {
    Store::open_or_init(
        &home.path().join("store"),
        Some(agentbox_store::BackendKind::Layers),
    )
    .expect("store")
}

#[test]
fn a_held_environment_keeps_its_history_and_refuses_every_tree_operation() {
    let home = TempHome::new();
    let store = store(&home);
    let env = store
        .create_held_env("box", held("sha256:a0"), "created")
        .expect("create");
    assert_eq!(env.held_by.as_deref(), Some("docker"));
    assert!(
        !home.path().join("store/envs/box/work").exists(),
        "a held environment has no work area"
    );
    let first = store.node(env.head.as_str()).expect("first node");
    let second = store
        .commit_held("box", held("sha256:b1"), opts("second"))
        .expect("commit");
    let third = store
        .commit_held("box", held("sha256:c2"), opts("third"))
        .expect("commit");
    assert_eq!(second.parent.as_ref(), Some(&first.id));
    assert_eq!(third.parent.as_ref(), Some(&second.id));
    assert_eq!(third.command.as_deref(), Some("make"));
    let log: Vec<String> = store
        .log("box")
        .expect("log")
        .iter()
        .map(|n| n.message.clone())
        .collect();
    assert_eq!(log, ["third", "second", "created"]);
    assert_eq!(
        store.held_of(&second).expect("held_of"),
        Some(held("sha256:b1"))
    );

    // Tags and refs work as for any node.
    store.set_tag("box", "good", "HEAD~1").expect("tag");
    let (node, object) = store
        .checkout_held("box", "good", "docker")
        .expect("checkout");
    assert_eq!(node.id, second.id);
    assert_eq!(object, held("sha256:b1"));
    assert_eq!(store.env("box").expect("env").head, second.id);
    // Another provider's name is refused, with nothing moved.
    let other = store.checkout_held("box", "HEAD~1", "local").unwrap_err();
    assert!(matches!(other, Error::Refused { .. }), "{other}");
    assert_eq!(store.env("box").expect("env").head, second.id);

    // The store reads no held tree: every tree operation names the provider.
    for e in [
        store.show("box", "HEAD").map(|_| ()).unwrap_err(),
        store
            .diff("box", "HEAD~1", Some("HEAD"))
            .map(|_| ())
            .unwrap_err(),
        store.checkout("box", "HEAD~1").map(|_| ()).unwrap_err(),
        store.commit("box", opts("x")).map(|_| ()).unwrap_err(),
        store.node_tree(&third).map(|_| ()).unwrap_err(),
    ] {
        assert!(
            matches!(&e, Error::Held { by, .. } if by == "docker"),
            "expected a held error, got {e}"
        );
        assert!(e.hint().is_some());
    }
    // A commit of a store environment through the held path is refused too.
    let plain = store
        .create_env("plain", None, agentbox_store::Source::Empty, "empty")
        .expect("plain env");
    let e = store
        .commit_held(&plain.name, held("sha256:d3"), opts("no"))
        .unwrap_err();
    assert!(matches!(e, Error::Refused { .. }), "{e}");
}

#[test]
fn a_fork_of_a_held_node_is_held_and_freed_layers_queue_their_objects() {
    let home = TempHome::new();
    let store = store(&home);
    store
        .create_held_env("box", held("sha256:a0"), "created")
        .expect("create");
    for i in 1..=4 {
        store
            .commit_held("box", held(&format!("sha256:n{i}")), opts(&format!("n{i}")))
            .expect("commit");
    }
    let fork = store.fork_env("box", "HEAD~1", "fork", None).expect("fork");
    assert_eq!(fork.held_by.as_deref(), Some("docker"));
    assert!(!home.path().join("store/envs/fork/work").exists());
    let forked = store
        .commit_held("fork", held("sha256:f1"), opts("in the fork"))
        .expect("commit in fork");
    assert_eq!(forked.seq, 1);

    // Keep two nodes of the box: its older ones go; n3 stays the fork's base.
    let kept = store.retain("box", 2).expect("retain");
    assert!(!kept.dropped.is_empty());
    assert!(store.released("docker").expect("released").is_empty());
    let report = store.gc().expect("gc");
    assert!(!report.removed_layers.is_empty());
    let released: Vec<String> = store
        .released("docker")
        .expect("released")
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert!(
        released.contains(&"sha256:n1".to_owned()),
        "the dropped nodes' objects are queued: {released:?}"
    );
    assert!(!released.contains(&"sha256:n3".to_owned()), "{released:?}");
    assert!(!released.contains(&"sha256:n4".to_owned()), "{released:?}");

    // fsck finds nothing wrong with held layers (records without directories).
    let fsck = store.fsck(false).expect("fsck");
    assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);

    // Removing both environments frees every object once GC runs; draining empties the queue.
    store.remove_env("fork").expect("remove fork");
    store.remove_env("box").expect("remove box");
    store.gc().expect("gc");
    let mut all: Vec<String> = Vec::new();
    for (object, entry) in store.released("docker").expect("released") {
        all.push(object);
        store.forget_released(&entry).expect("forget");
    }
    for object in ["sha256:a0", "sha256:n4", "sha256:f1"] {
        assert!(all.contains(&object.to_owned()), "{object} in {all:?}");
    }
    assert!(store.released("docker").expect("released").is_empty());
    // Forgetting twice is harmless (a drain that crashed after removing the object).
    store
        .forget_released(&home.path().join("store/released/docker/none"))
        .expect("forget again");
}

#[test]
fn a_held_layer_names_a_provider_that_can_be_a_directory() {
    let home = TempHome::new();
    let store = store(&home);
    for by in ["", "../x", "Docker", "a/b"] {
        let e = store
            .create_held_env(
                "box",
                Held {
                    by: by.into(),
                    object: "o".into(),
                },
                "m",
            )
            .unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{by:?}: {e}");
    }
    assert!(store.env("box").is_err(), "nothing was made");
}
