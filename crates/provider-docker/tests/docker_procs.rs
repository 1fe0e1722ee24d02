//! A Docker box's processes against a real engine: background processes (spawn, ps,
//! logs, kill) and their ends, a command killed by a checkout, a destroy while the engine
//! does not answer, and a create whose container dies at once.

mod common;

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agentbox_boxes::progress::Progress;
use agentbox_boxes::progress::Quiet;
use agentbox_boxes::types::{ProcInfo, ProcKind};
use agentbox_boxes::BoxError;
use agentbox_core::home::Home;
use agentbox_provider_docker::names;
use agentbox_testkit::TempHome;
use common::{
    box_name, boxes, command, dirty_repo, engine, git, leftovers, output, spec, test_image, Sweep,
};

/// Wait (as long as it takes) until `done` says so, looking again every 50 ms.
fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn spawned(argv: &[&str]) -> agentbox_boxes::provider::Command {
    let mut c = command(argv);
    c.kind = ProcKind::Spawn;
    c.capture = false;
    c
}

fn find(procs: &[ProcInfo], id: u64) -> ProcInfo {
    procs
        .iter()
        .find(|p| p.id == id)
        .cloned()
        .unwrap_or_else(|| panic!("no process {id}: {procs:?}"))
}

#[test]
fn background_processes_have_ids_logs_and_ends_and_a_checkout_kills_them() {
    let test = "background_processes_have_ids_logs_and_ends_and_a_checkout_kills_them";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let boxes = boxes(&home);
    let name = box_name("procs");
    boxes
        .create(&spec(&name, &repo, &image), &Quiet)
        .expect("create");

    // A long one: listed by its id as a background process, its output in its log.
    let long = boxes
        .spawn(
            &name,
            spawned(&["sh", "-c", "echo out; echo err >&2; exec sleep 300"]),
        )
        .expect("spawn");
    assert_eq!(long.id, 1);
    assert_eq!(long.log, Path::new("/var/log/agentbox/1.log"));
    until(|| boxes.read_log(&name, 1, 0, 1 << 20).expect("log") == b"out\nerr\n");
    // Read from an offset, and bounded.
    assert_eq!(boxes.read_log(&name, 1, 4, 2).expect("log"), b"er");
    assert_eq!(boxes.read_log(&name, 1, 8, 100).expect("log"), b"");
    let p = find(&boxes.processes(&name).expect("ps"), 1);
    assert_eq!((p.kind, p.pid, p.exit), (ProcKind::Spawn, long.pid, None));
    assert_eq!(
        p.argv,
        ["sh", "-c", "echo out; echo err >&2; exec sleep 300"]
    );
    // Its wrapper is not listed, nor is it listed twice.
    let all = boxes.processes(&name).expect("ps");
    assert_eq!(all.len(), 1, "{all:?}");
    // No log for an id never given.
    assert!(matches!(
        boxes.read_log(&name, 99, 0, 10),
        Err(BoxError::NoLog { id: 99, .. })
    ));

    // One that ends well is reported started, then exited 0 with its first lines.
    let quick = boxes
        .spawn(&name, spawned(&["sh", "-c", "echo done"]))
        .expect("spawn");
    until(|| {
        find(&boxes.processes(&name).expect("ps"), quick.id)
            .exit
            .is_some()
    });
    let exit = find(&boxes.processes(&name).expect("ps"), quick.id)
        .exit
        .expect("exit");
    assert_eq!((exit.status, exit.output), (0, vec!["done".to_owned()]));
    // One that fails at once is an error naming its status and output.
    match boxes.spawn(&name, spawned(&["sh", "-c", "echo bad; exit 3"])) {
        Err(BoxError::SpawnExited {
            id, status, output, ..
        }) => {
            assert_eq!((id, status, output), (3, 3, vec!["bad".to_owned()]));
        }
        other => panic!("{other:?}"),
    }
    // A program the box lacks, a directory it lacks: as in a local box.
    match boxes.spawn(&name, spawned(&["no-such-program"])) {
        Err(BoxError::Command { status, message }) => {
            assert_eq!(
                (status, message.as_str()),
                (127, "no-such-program: command not found in the box")
            );
        }
        other => panic!("{other:?}"),
    }
    let mut elsewhere = spawned(&["true"]);
    elsewhere.workdir = Some(agentbox_boxes::types::Workdir::explicit("/no/such/dir"));
    assert!(matches!(
        boxes.spawn(&name, elsewhere),
        Err(BoxError::Command { status: 2, .. })
    ));

    // Killed by its id, with the signal asked for: it ends 128 + N (SIGINT reaches it).
    let int = boxes
        .spawn(&name, spawned(&["sleep", "300"]))
        .expect("spawn");
    boxes.kill(&name, int.id, 2).expect("kill");
    until(|| {
        find(&boxes.processes(&name).expect("ps"), int.id)
            .exit
            .is_some()
    });
    let exit = find(&boxes.processes(&name).expect("ps"), int.id)
        .exit
        .expect("exit");
    assert_eq!((exit.status, exit.killed_by_checkout), (130, false));
    // An ended one is no target any more.
    assert!(matches!(
        boxes.kill(&name, int.id, 9),
        Err(BoxError::NoSuchProcess { .. })
    ));

    // A foreground command killed by a checkout ends 137, as in a local box, and says so;
    // the checkout kills the background one too, and notes it.
    std::thread::scope(|s| {
        let running = s.spawn(|| {
            let mut c = command(&["sh", "-c", "touch /tmp/running; sleep 300"]);
            c.capture = false;
            boxes.exec(&name, c)
        });
        until(|| output(&boxes, &name, &["test", "-e", "/tmp/running"]).0 == 0);
        let out = boxes.checkout(&name, "HEAD", false).expect("checkout");
        assert!(out.killed >= 2, "{}", out.killed);
        let ended = running.join().expect("thread").expect("exec");
        assert_eq!((ended.status, ended.killed_by_checkout), (137, true));
        assert_eq!(ended.node, None);
    });
    let p = find(&boxes.processes(&name).expect("ps"), long.id);
    let exit = p.exit.expect("ended with the checkout");
    assert_eq!((exit.status, exit.killed_by_checkout), (137, true));
    assert_eq!(exit.output, ["out", "err"]);
    // Ids are never given twice.
    let next = boxes
        .spawn(&name, spawned(&["sleep", "300"]))
        .expect("spawn");
    assert_eq!(next.id, int.id + 1);
    // A stopped box's processes went with it (as a local box's).
    assert!(boxes.stop(&name).expect("stop"));
    assert!(boxes.processes(&name).expect("ps").is_empty());
    let ended: Vec<u64> = {
        boxes.start(&name).expect("start");
        boxes
            .processes(&name)
            .expect("ps")
            .into_iter()
            .map(|p| p.id)
            .collect()
    };
    assert!(!ended.contains(&next.id), "{ended:?}");

    boxes.destroy(&name, true, &Quiet).expect("destroy");
    assert!(git(&repo, &["for-each-ref", "refs/heads/agentbox"]).is_empty());
}

/// A Unix socket at `path` that forwards every connection to the engine's, until stopped.
struct Relay {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(path: &Path) -> Relay {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).expect("bind");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = conn else { continue };
                let Ok(engine) = UnixStream::connect("/var/run/docker.sock") else {
                    continue;
                };
                let (c2, e2) = (
                    client.try_clone().expect("clone"),
                    engine.try_clone().expect("clone"),
                );
                std::thread::spawn(move || pipe(client, engine));
                std::thread::spawn(move || pipe(e2, c2));
            }
        });
        Relay {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
        }
    }

    /// No engine answers at the path any more.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            t.join().expect("relay");
        }
        std::fs::remove_file(&self.path).expect("remove the socket");
    }
}

fn pipe(mut from: UnixStream, mut to: UnixStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.flush();
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// What a progress was told.
#[derive(Default)]
struct Notes(std::sync::Mutex<Vec<String>>);

impl Progress for Notes {
    fn note(&self, text: &str) {
        self.0.lock().expect("notes").push(text.to_owned());
    }
    fn busy(
        &self,
        _what: &str,
        work: &mut dyn FnMut() -> agentbox_boxes::Result<()>,
    ) -> agentbox_boxes::Result<()> {
        work()
    }
}

#[test]
fn a_box_is_destroyed_while_its_engine_does_not_answer_and_prune_removes_its_container_later() {
    let test =
        "a_box_is_destroyed_while_its_engine_does_not_answer_and_prune_removes_its_container_later";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let socket = tmp.path().join("engine.sock");
    let url = format!("unix://{}", socket.display());
    let mut relay = Relay::start(&socket);
    let name = box_name("unanswered");
    {
        let boxes = boxes(&home);
        let mut s = spec(&name, &repo, &image);
        s.engine = Some(url.clone());
        boxes.create(&s, &Quiet).expect("create");
        assert_eq!(output(&boxes, &name, &["cat", "u.txt"]).1, "untracked\n");
    }
    relay.stop();

    // A fresh façade (no connection kept): the engine does not answer.
    let boxes = boxes(&home);
    let notes = Notes::default();
    boxes.destroy(&name, true, &notes).expect("destroy goes on");
    let notes = notes.0.into_inner().expect("notes");
    let warning = notes
        .iter()
        .find(|n| n.contains("warning"))
        .unwrap_or_else(|| panic!("{notes:?}"));
    assert!(
        warning.contains(&url)
            && warning.contains(&names::container(&name))
            && warning.contains("agentbox prune"),
        "{warning}"
    );
    assert!(!boxes.is_box(&name), "its record went");
    assert!(
        boxes.store().expect("store").env(&name).is_err(),
        "its history went"
    );
    assert!(git(&repo, &["for-each-ref", "refs/heads/agentbox"]).is_empty());
    assert!(
        engine
            .container(&names::container(&name))
            .expect("inspect")
            .is_some(),
        "the container is still on the engine"
    );
    // While the engine does not answer, prune says the container is kept, and why.
    let pruned = boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    let kept = pruned
        .boxes
        .iter()
        .find(|l| l.target == names::container(&name))
        .unwrap_or_else(|| panic!("{:?}", pruned.boxes));
    assert!(
        matches!(&kept.outcome, agentbox_boxes::types::PruneOutcome::Kept(why) if why.contains("did not answer")),
        "{kept:?}"
    );

    // Once it answers, prune removes it and forgets it.
    let _relay = Relay::start(&socket);
    let boxes = common::boxes(&home);
    boxes.gc().expect("gc");
    boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert!(engine
        .container(&names::container(&name))
        .expect("inspect")
        .is_none());
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    assert!(agentbox_provider_docker::ledger::queued(&home)
        .expect("queue")
        .is_empty());
}

#[test]
fn a_create_whose_container_dies_at_once_fails_saying_so_and_leaves_nothing() {
    let test = "a_create_whose_container_dies_at_once_fails_saying_so_and_leaves_nothing";
    let Some(engine) = engine(test) else { return };
    // An image whose `sh` exits at once (status 1): the keep-alive command cannot run.
    let work = tempfile::tempdir().expect("tmp");
    let tar_path = work.path().join("rootfs.tar");
    {
        let mut b = tar::Builder::new(fs_err::File::create(&tar_path).expect("tar"));
        let bin = fs_err::read("/bin/busybox").expect("busybox");
        let mut add = |path: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o755);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, path, data).expect("entry");
        };
        add("bin/busybox", &bin);
        add("bin/sh", b"#!/bin/busybox false\n");
        b.into_inner().expect("finish").flush().expect("flush");
    }
    let tag = format!("dies-{}", std::process::id());
    let image = format!("agentbox-test-dies:{tag}");
    engine
        .import_rootfs(&tar_path, "agentbox-test-dies", &tag, &[])
        .expect("import");
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let refs_before = git(&repo, &["for-each-ref"]);
    let boxes = boxes(&home);
    let name = box_name("dies");
    let err = boxes
        .create(&spec(&name, &repo, &image), &Quiet)
        .expect_err("its container dies");
    let text = err.to_string();
    assert!(
        text.contains("stopped at once") && text.contains("status 1"),
        "{text}"
    );
    assert!(!boxes.is_box(&name));
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    assert_eq!(git(&repo, &["for-each-ref"]), refs_before);
    engine.remove_image(&image).expect("remove the image");
}
