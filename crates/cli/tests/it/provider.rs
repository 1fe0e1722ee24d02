//! The provider conformance suite: the box behaviours every provider must have, written once
//! against the façade (`ops::Boxes`) and the `Provider` trait, and run here on the local
//! provider (root: namespaces and mounts). A new provider runs the same [`suite`] with its
//! own `Arc<dyn Provider>`.

use std::path::Path;
use std::sync::Arc;

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_boxes::create::{Quiet, Settings, Spec, Workspace};
use agentbox_boxes::ops::{BoxState, Boxes};
use agentbox_boxes::provider::{Command, OnBox, Provider};
use agentbox_core::Home;
use agentbox_provider_local::proto::ProcKind;
use agentbox_store::{CommitOpts, Store};
use agentbox_testkit::tier::require_root;

/// A box of the test's project, made through the façade.
fn make_box(boxes: &Boxes, project: &Path, name: &str) -> agentbox_boxes::record::BoxRecord {
    let spec = Spec {
        name: Some(name.to_owned()),
        workspace: Workspace::From(project.to_owned()),
        from_ref: None,
        no_git: false,
        settings: Settings::default(),
    };
    boxes.create(&spec, &Quiet).expect("create").record
}

/// `sh -c SCRIPT` in the box through the provider: its status and output.
fn sh(p: &dyn Provider, name: &str, script: &str, capture: bool) -> (i32, String) {
    let ran = p
        .collect(
            name,
            vec!["sh".into(), "-c".into(), script.into()],
            "/workspace",
            capture,
        )
        .expect("run in the box");
    (ran.status, ran.output)
}

/// Every behaviour the README promises of a box, on `provider`, in agentbox home `home` (a
/// project to copy is made under `root`).
fn suite(provider: Arc<dyn Provider>, home: Home, root: &Path) {
    let boxes = Boxes::new(home.clone(), provider.clone());
    let p = &*provider;
    let project = root.join("project");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let rec = make_box(&boxes, &project, "conf");
    let name = rec.name.as_str();
    let store = Store::open(&home.store_dir()).expect("store");

    // A new box is stopped; a stopped box's history operations go to the store.
    assert!(!p.is_running(name).expect("is_running"));
    assert_eq!(p.commit(name, "x", None).expect("commit"), OnBox::Stopped);
    assert_eq!(boxes.status(name).expect("status").state, BoxState::Stopped);

    // Started, it runs commands in its copy of the project, with their status.
    boxes.start(name).expect("start");
    assert!(p.is_running(name).expect("is_running"));
    assert_eq!(
        sh(p, name, "cat a.txt; exit 3", false),
        (3, "one\n".to_owned())
    );

    // A command's changes become a node, and a checkout brings the tree back.
    let before = store.env(name).expect("env").head;
    let ran = p
        .collect(
            name,
            vec!["sh".into(), "-c".into(), "echo two > a.txt".into()],
            "/workspace",
            true,
        )
        .expect("run");
    let node = ran.node.expect("the change made a node");
    assert_ne!(node, before);
    let back = boxes.checkout(name, &before, false).expect("checkout");
    assert_eq!(back.node.id, before);
    assert_eq!(sh(p, name, "cat a.txt", false).1, "one\n");
    // An explicit commit of a running box goes through the provider.
    sh(p, name, "echo three > a.txt", false);
    let committed = boxes
        .commit(
            name,
            CommitOpts {
                message: "three".into(),
                ..CommitOpts::default()
            },
        )
        .expect("commit");
    assert_eq!(committed.message, "three");

    // Background processes: listed, signalled, and killed by a checkout.
    let started = boxes
        .spawn(
            name,
            Command {
                argv: vec!["sleep".into(), "1000".into()],
                env: Vec::new(),
                workdir: None,
                kind: ProcKind::Spawn,
                capture: false,
                tty: Some(false),
            },
        )
        .expect("spawn");
    let running = |id: u64| {
        boxes
            .processes(name)
            .expect("processes")
            .iter()
            .any(|p| p.id == id && p.exit.is_none())
    };
    assert!(running(started.id));
    let killed = boxes
        .checkout(name, "HEAD", false)
        .expect("checkout")
        .killed;
    assert_eq!(killed, 1);
    assert!(!running(started.id));

    // Its branch reaches the host repository.
    sh(
        p,
        name,
        "git -c user.name=u -c user.email=u@x commit -qam work",
        false,
    );
    let synced = boxes.sync(&rec).expect("sync");
    let tip = sh(p, name, "git rev-parse HEAD", false).1;
    assert_eq!(synced[0].tip.as_deref(), Some(tip.trim()));
    assert_eq!(
        git(&project, &["rev-parse", &rec.repos[0].branch]).trim(),
        tip.trim()
    );

    // Its status says it runs, with its health.
    let status = boxes.status(name).expect("status");
    assert_eq!(status.state, BoxState::Running);
    assert!(status.capture_state.is_some());
    assert!(!status.scratch.is_empty());

    // Stopped, and gone.
    assert!(boxes.stop(name).expect("stop"));
    assert!(!p.is_running(name).expect("is_running"));
    assert!(boxes.kill(name, started.id, 9).is_err());
    boxes.destroy(name, false, &Quiet).expect("destroy");
    assert!(!boxes.is_box(name));
}

#[test]
fn the_local_provider_conforms() {
    if !require_root("the_local_provider_conforms") {
        return;
    }
    let env = Env::new();
    let home = Home::at(env.path("home"));
    let provider = Arc::new(agentbox_provider_local::local::LocalProvider::with_binary(
        home.clone(),
        env!("CARGO_BIN_EXE_agentbox").into(),
    ));
    let root = env.home.path().to_owned();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        suite(provider, home, &root)
    }));
    kill_supervisors(&env.path("home"));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
