//! The provider conformance suite: the box behaviours every provider must have, written once
//! against the façade (`facade::Boxes`) and the `Provider` trait, and run here on the local
//! provider (root: namespaces and mounts). A new provider runs the same [`suite`] with its
//! own `Arc<dyn Provider>`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_boxes::facade::Boxes;
use agentbox_boxes::lifecycle::create::{Settings, Spec, Workspace};
use agentbox_boxes::lifecycle::ops::BoxState;
use agentbox_boxes::progress::Quiet;
use agentbox_boxes::provider::{Command, OnBox, Provider};
use agentbox_boxes::records::record::{BoxDirs, BoxRecord};
use agentbox_boxes::types::ProcInfo;
use agentbox_core::Home;
use agentbox_provider_local::proto::ProcKind;
use agentbox_store::{CommitOpts, Store};
use agentbox_testkit::tier::require_root;

/// A box of the test's project, made through the façade.
fn make_box(boxes: &Boxes, project: &Path, name: &str) -> BoxRecord {
    make_box_with(boxes, project, name, Settings::default())
}

fn make_box_with(boxes: &Boxes, project: &Path, name: &str, settings: Settings) -> BoxRecord {
    let spec = Spec {
        name: Some(name.to_owned()),
        workspace: Workspace::From(project.to_owned()),
        from_ref: None,
        no_git: false,
        settings,
        checkpoint: None,
        no_checkpoint: true,
        resync: None,
        accept_stale: false,
        provider: None,
        engine: None,
        dockerfile: None,
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
    let sandbox = status
        .sandbox
        .as_ref()
        .expect("a local box's sandbox status");
    assert!(sandbox.capture_state.is_some());
    assert!(!sandbox.scratch.is_empty());

    // Foreground commands, background processes, checkouts under running processes.
    exec_records_what_it_changes(&boxes, &store, name);
    background_processes_are_listed_logged_and_signalled(&boxes, name);
    checkout_kills_the_processes_unless_they_are_kept(&boxes, &store, name);

    // Stopped, and gone.
    assert!(boxes.stop(name).expect("stop"));
    assert!(!p.is_running(name).expect("is_running"));
    assert!(boxes.kill(name, started.id, 9).is_err());
    destroyed_without_a_trace(&boxes, &store, &project, &rec, false);

    // A box that records only what is committed: its status, and its tree across a restart.
    let quiet = make_box_with(
        &boxes,
        &project,
        "quiet",
        Settings {
            capture: Some(false),
            ..Settings::default()
        },
    );
    status_and_restart_keep_the_tree(&boxes, &store, &quiet.name);
    destroyed_without_a_trace(&boxes, &store, &project, &quiet, true);
}

fn command(argv: &[&str], kind: ProcKind, capture: bool) -> Command {
    Command {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: vec![("GREETING".into(), "hello".into())],
        workdir: None,
        kind,
        capture,
        tty: Some(false),
    }
}

/// Wait (up to 20 s) until `cond` holds.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Process `id` of box `name`, as the façade lists it.
fn process(boxes: &Boxes, name: &str, id: u64) -> Option<ProcInfo> {
    boxes
        .processes(name)
        .expect("processes")
        .into_iter()
        .find(|p| p.id == id)
}

/// `exec` runs a command with the caller's variables and passes its status through; with
/// capture, what it changed is a node labelled with the command, and HEAD moves to it.
fn exec_records_what_it_changes(boxes: &Boxes, store: &Store, name: &str) {
    let argv = ["sh", "-c", "echo \"$GREETING\" > greeting.txt"];
    let out = boxes
        .exec(name, command(&argv, ProcKind::Exec, true))
        .expect("exec");
    assert_eq!(out.status, 0);
    assert!(!out.killed_by_checkout);
    let node = out.node.expect("the change made a node");
    let made = store.node(&node).expect("the node is in the store");
    let label = agentbox_boxes::types::render_command(&argv.map(str::to_owned));
    assert_eq!(made.command.as_deref(), Some(label.as_str()));
    assert_eq!(store.env(name).expect("env").head, node);
    assert!(store
        .show(name, &node)
        .expect("show")
        .1
        .iter()
        .any(|c| c.path.ends_with("greeting.txt")));
    let p = boxes.provider();
    assert_eq!(sh(p, name, "cat greeting.txt", false).1, "hello\n");

    // A status passes through; a command that changed nothing makes no node.
    let out = boxes
        .exec(name, command(&["sh", "-c", "exit 7"], ProcKind::Exec, true))
        .expect("exec");
    assert_eq!((out.status, out.node), (7, None));
    // Without capture, a change makes no node of its own.
    let out = boxes
        .exec(
            name,
            command(
                &["sh", "-c", "echo x > uncaptured.txt"],
                ProcKind::Exec,
                false,
            ),
        )
        .expect("exec");
    assert_eq!((out.status, out.node), (0, None));
    // A command the box does not have: 127, as a shell says.
    let status = match boxes.exec(
        name,
        command(&["no-such-command-xyz"], ProcKind::Exec, true),
    ) {
        Ok(out) => out.status,
        Err(e) => {
            assert!(e.to_string().contains("no-such-command-xyz"), "{e}");
            e.exit_code()
        }
    };
    assert_eq!(status, 127);
}

/// `spawn` starts a process in the background with its output in a log; `processes`
/// lists it while it runs and with its exit afterwards; `kill` signals it; one that fails
/// at once is an error carrying its status and output.
fn background_processes_are_listed_logged_and_signalled(boxes: &Boxes, name: &str) {
    let started = boxes
        .spawn(
            name,
            command(
                &[
                    "sh",
                    "-c",
                    "echo \"$GREETING\"; echo oops >&2; exec sleep 1000",
                ],
                ProcKind::Spawn,
                false,
            ),
        )
        .expect("spawn");
    let running = process(boxes, name, started.id).expect("listed");
    assert_eq!(running.pid, started.pid);
    assert_eq!(running.kind, ProcKind::Spawn);
    assert_eq!(running.argv[0], "sh");
    assert_eq!(running.exit, None);
    wait_until("the log has its output", || {
        std::fs::read_to_string(&started.log).is_ok_and(|l| l == "hello\noops\n")
    });

    boxes.kill(name, started.id, libc::SIGTERM).expect("kill");
    wait_until("the process ended", || {
        process(boxes, name, started.id).is_some_and(|p| p.exit.is_some())
    });
    let exit = process(boxes, name, started.id)
        .and_then(|p| p.exit)
        .expect("its exit");
    assert_eq!(exit.status, 128 + libc::SIGTERM);
    assert!(!exit.killed_by_checkout);
    assert_eq!(exit.output, ["hello", "oops"]);
    // A process it does not have.
    assert!(boxes.kill(name, started.id + 1000, libc::SIGTERM).is_err());

    // Its error says how it ended and what it said (the local provider's reaches the
    // façade as the supervisor's message: the text is the contract).
    let broken = ["sh", "-c", "echo broken >&2; exit 3"];
    let e = boxes
        .spawn(name, command(&broken, ProcKind::Spawn, false))
        .expect_err("a spawn that fails at once");
    let message = e.to_string();
    assert!(
        message.contains("exited at once with status 3") && message.contains("broken"),
        "{message}"
    );
    let ended = boxes
        .processes(name)
        .expect("processes")
        .into_iter()
        .find(|p| p.argv == broken)
        .and_then(|p| p.exit)
        .expect("listed with its exit");
    assert_eq!(ended.status, 3);
    assert_eq!(ended.output, ["broken"]);
}

/// A checkout with `keep_processes` restores the tree under the running processes (a new
/// node holding the reference's tree); without, it kills them all, foreground commands
/// included (137, and they are told).
fn checkout_kills_the_processes_unless_they_are_kept(boxes: &Boxes, store: &Store, name: &str) {
    let p = boxes.provider();
    let before = store.env(name).expect("env").head;
    let was = sh(p, name, "cat a.txt", false).1;
    let server = boxes
        .spawn(name, command(&["sleep", "1000"], ProcKind::Spawn, false))
        .expect("spawn");
    let changed = p
        .collect(
            name,
            vec!["sh".into(), "-c".into(), "echo changed > a.txt".into()],
            "/workspace",
            true,
        )
        .expect("run")
        .node
        .expect("a node");

    let kept = boxes
        .checkout(name, &before, true)
        .expect("checkout keeping the processes");
    assert_eq!(kept.killed, 0);
    assert_ne!(kept.node.id, changed);
    assert!(
        store
            .diff(name, &before, Some(&kept.node.id))
            .expect("diff")
            .is_empty(),
        "the new node holds the reference's tree"
    );
    assert_eq!(sh(p, name, "cat a.txt", false).1, was);
    assert!(process(boxes, name, server.id).is_some_and(|p| p.exit.is_none()));

    // Without: every process goes, a foreground one too.
    std::thread::scope(|scope| {
        let fg =
            scope.spawn(|| boxes.exec(name, command(&["sleep", "999"], ProcKind::Exec, false)));
        wait_until("the foreground command runs", || {
            boxes
                .processes(name)
                .expect("processes")
                .iter()
                .any(|p| p.kind == ProcKind::Exec && p.argv == ["sleep", "999"] && p.exit.is_none())
        });
        let done = boxes.checkout(name, &changed, false).expect("checkout");
        assert_eq!(done.node.id, changed);
        assert_eq!(done.killed, 2, "the server and the foreground command");
        let out = fg.join().expect("exec thread").expect("exec");
        assert_eq!(out.status, 137);
        assert!(out.killed_by_checkout);
    });
    let exit = process(boxes, name, server.id)
        .and_then(|p| p.exit)
        .expect("the server ended");
    assert!(exit.killed_by_checkout);
    assert_eq!(exit.status, 137);
    assert_eq!(sh(p, name, "cat a.txt", false).1, "changed\n");
}

/// A running box's status tells its processes, uncommitted work, capture and scratch
/// mounts; stopped and started again, the box has its tree, history and uncommitted work,
/// and none of its old processes; a command starts a stopped box.
fn status_and_restart_keep_the_tree(boxes: &Boxes, store: &Store, name: &str) {
    let p = boxes.provider();
    boxes.start(name).expect("start");
    boxes
        .start(name)
        .expect("starting a running box does nothing");
    let (status, _) = sh(p, name, "echo draft > draft.txt", false);
    assert_eq!(status, 0);
    let server = boxes
        .spawn(name, command(&["sleep", "1000"], ProcKind::Spawn, false))
        .expect("spawn");

    let st = boxes.status(name).expect("status");
    assert_eq!(st.state, BoxState::Running);
    assert_eq!(st.processes, 1);
    assert!(!st.record.capture);
    let sandbox = st.sandbox.as_ref().expect("a local box's sandbox status");
    assert!(sandbox.capture_state.is_none(), "capture is off");
    assert_eq!(st.changed, 1, "draft.txt, recorded by nothing");
    assert!(sandbox.scratch.iter().any(|m| m.path == "/tmp"));
    let dirty = st.branches[0]
        .dirty
        .clone()
        .expect("read inside the running box");
    assert!(dirty.iter().any(|d| d == "draft.txt"), "{dirty:?}");
    assert_eq!(st.branches[0].ahead, Some(0));
    assert!(matches!(p.health(name).expect("health"), OnBox::Running(_)));
    assert!(matches!(p.dirty(name).expect("dirty"), OnBox::Running(_)));

    let head = store.env(name).expect("env").head;
    let nodes = store.log(name).expect("log").len();
    assert!(boxes.stop(name).expect("stop"));
    assert!(!boxes.stop(name).expect("stop again"), "it was not running");
    let st = boxes.status(name).expect("status");
    assert_eq!(st.state, BoxState::Stopped);
    assert_eq!(st.processes, 0);
    assert_eq!(
        st.changed, 1,
        "the uncommitted work stays in the box's layer"
    );
    assert_eq!(st.branches[0].dirty, None, "not known while stopped");
    assert!(boxes.processes(name).expect("processes").is_empty());
    assert!(matches!(p.health(name).expect("health"), OnBox::Stopped));
    assert_eq!(p.dirty(name).expect("dirty"), OnBox::Stopped);

    boxes.start(name).expect("start");
    assert_eq!(store.env(name).expect("env").head, head);
    assert_eq!(store.log(name).expect("log").len(), nodes);
    assert_eq!(sh(p, name, "cat draft.txt a.txt", false).1, "draft\none\n");
    assert!(
        process(boxes, name, server.id).is_none_or(|p| p.exit.is_some()),
        "a restart runs none of the old processes"
    );
    assert!(boxes
        .processes(name)
        .expect("processes")
        .iter()
        .all(|p| p.exit.is_some()));

    // A command starts a stopped box.
    boxes.stop(name).expect("stop");
    assert_eq!(
        sh(p, name, "cat draft.txt", false),
        (0, "draft\n".to_owned())
    );
    assert!(p.is_running(name).expect("is_running"));
}

/// `destroy` stops the box and removes its record, directory, environment, base pins and
/// mounts (with `delete_branch`, its branches too; else they stay).
fn destroyed_without_a_trace(
    boxes: &Boxes,
    store: &Store,
    project: &Path,
    rec: &BoxRecord,
    delete_branch: bool,
) {
    let name = rec.name.as_str();
    let branch = rec.repos[0].branch.clone();
    assert!(!git(
        project,
        &["for-each-ref", &format!("refs/agentbox/{name}/")]
    )
    .is_empty());
    let deleted = boxes.destroy(name, delete_branch, &Quiet).expect("destroy");
    assert_eq!(
        deleted,
        if delete_branch {
            vec![branch.clone()]
        } else {
            vec![]
        }
    );
    assert!(!boxes.is_box(name));
    assert!(!boxes.provider().is_running(name).expect("is_running"));
    assert!(!BoxDirs::new(boxes.home(), name).dir.exists());
    assert!(store.env(name).is_err(), "its environment is gone");
    assert!(
        git(
            project,
            &["for-each-ref", &format!("refs/agentbox/{name}/")]
        )
        .is_empty(),
        "its pins are gone"
    );
    assert_eq!(
        git(project, &["branch", "--list", &branch]).is_empty(),
        delete_branch
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let home = boxes.home().root().to_string_lossy().into_owned();
    assert!(
        !mounts
            .lines()
            .any(|l| l.contains(&home) && l.contains(name)),
        "no mount of box {name} is left:\n{mounts}"
    );
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
