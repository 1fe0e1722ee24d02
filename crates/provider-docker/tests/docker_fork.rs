//! Forks and tournaments of a Docker box through the façade, against a real engine: a fork
//! is a Docker box of its own (its container on the node's image, its own branch moved
//! inside it and synced to the host, its own history starting at the node), the source is
//! untouched, a fork outlives its source (prune keeps the images its nodes name), and a
//! tournament races Docker forks and moves the source to the winner with `keep`.

mod common;

use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use agentbox_boxes::history::fork::ForkSpec;
use agentbox_boxes::history::tournament::{Candidate, TournamentSpec, Verdict};
use agentbox_boxes::progress::Quiet;
use agentbox_core::home::Home;
use agentbox_provider_docker::names;
use agentbox_testkit::TempHome;
use common::{
    box_name, boxes, command, dirty_repo, engine, git, output, spec, test_image, tools_image, Sweep,
};

#[test]
fn a_fork_of_a_docker_box_is_a_docker_box_on_its_own_branch_that_outlives_its_source() {
    let test = "a_fork_of_a_docker_box_is_a_docker_box_on_its_own_branch_that_outlives_its_source";
    let Some(engine) = engine(test) else { return };
    let image = tools_image(&engine, false);
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
    let src = box_name("fsrc");
    boxes
        .create(&spec(&src, &repo, &image), &Quiet)
        .expect("create");
    let (st, out) = output(
        &boxes,
        &src,
        &[
            "sh",
            "-c",
            "echo forked > f.txt && git -c user.name=b -c user.email=b@example.org commit -qam 'in the source'",
        ],
    );
    assert_eq!(st, 0, "{out}");
    let at = boxes
        .commit(&src, agentbox_store::CommitOpts::default())
        .expect("commit")
        .id
        .into_string();
    let (_, src_tip) = output(&boxes, &src, &["git", "rev-parse", "HEAD"]);
    // Changed after the node: not in the fork.
    output(&boxes, &src, &["sh", "-c", "echo later > later.txt"]);

    let fork = box_name("ffork");
    let made = boxes
        .fork(
            &ForkSpec {
                source: src.clone(),
                name: Some(fork.clone()),
                at: None,
            },
            &Quiet,
        )
        .expect("fork");
    assert_eq!(made.record.provider, "docker");
    let store = boxes.store().expect("store");
    let head = store.node(&made.head).expect("head");
    assert_eq!(head.parent.as_ref().map(|p| p.as_str()), Some(at.as_str()));
    // Its own container, on its own branch, with the source's work at the node.
    assert!(engine
        .container(&names::container(&fork))
        .expect("inspect")
        .is_some());
    let (_, branch) = output(&boxes, &fork, &["git", "symbolic-ref", "--short", "HEAD"]);
    assert_eq!(branch.trim(), format!("agentbox/{fork}"));
    let (_, tip) = output(&boxes, &fork, &["git", "rev-parse", "HEAD"]);
    assert_eq!(tip, src_tip);
    assert_eq!(
        git(&repo, &["rev-parse", &format!("agentbox/{fork}")]),
        src_tip,
        "the host has the fork's branch at its tip"
    );
    assert_eq!(output(&boxes, &fork, &["cat", "f.txt"]).1, "forked\n");
    assert_ne!(output(&boxes, &fork, &["cat", "later.txt"]).0, 0);
    // The source is where it was.
    let (_, src_branch) = output(&boxes, &src, &["git", "symbolic-ref", "--short", "HEAD"]);
    assert_eq!(src_branch.trim(), format!("agentbox/{src}"));
    assert_eq!(output(&boxes, &src, &["cat", "later.txt"]).1, "later\n");

    // The fork's own work is its own node.
    let ran = boxes
        .exec(&fork, command(&["sh", "-c", "echo mine > mine.txt"]))
        .expect("exec");
    assert!(ran.node.is_some(), "a node of the fork's");
    assert_ne!(output(&boxes, &src, &["cat", "mine.txt"]).0, 0);

    boxes.destroy(&src, true, &Quiet).expect("destroy");
    boxes
        .destroy(&fork, true, &Quiet)
        .expect("destroy the fork");
}

#[test]
fn a_fork_outlives_its_source_the_image_it_started_on_kept_by_prune() {
    let test = "a_fork_outlives_its_source_the_image_it_started_on_kept_by_prune";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    // No repository: the fork's HEAD is the source's node itself, on the source's image.
    let dir = tmp.path().join("plain");
    fs_err::create_dir_all(&dir).expect("dir");
    fs_err::write(dir.join("p.txt"), "plain\n").expect("write");
    let boxes = boxes(&home);
    let src = box_name("osrc");
    boxes
        .create(&spec(&src, &dir, &image), &Quiet)
        .expect("create");
    let fork = box_name("ofork");
    let made = boxes
        .fork(
            &ForkSpec {
                source: src.clone(),
                name: Some(fork.clone()),
                at: None,
            },
            &Quiet,
        )
        .expect("fork");
    let src_head = boxes.store().expect("store").env(&src).expect("env").head;
    assert_eq!(made.head, src_head.as_str());
    assert_eq!(output(&boxes, &fork, &["cat", "p.txt"]).1, "plain\n");
    // The source goes, then the fork's container (behind agentbox's back): the image of
    // the node the fork is on, made by the source, stays through gc and prune, and the
    // fork's container is made again from it.
    boxes.destroy(&src, false, &Quiet).expect("destroy");
    boxes.gc().expect("gc");
    engine
        .remove_container(&names::container(&fork))
        .expect("remove the container");
    boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert_eq!(output(&boxes, &fork, &["cat", "p.txt"]).1, "plain\n");
    boxes
        .destroy(&fork, false, &Quiet)
        .expect("destroy the fork");
}

#[test]
fn a_tournament_of_a_docker_box_races_docker_forks_and_keeps_the_winner() {
    let test = "a_tournament_of_a_docker_box_races_docker_forks_and_keeps_the_winner";
    let Some(engine) = engine(test) else { return };
    let image = tools_image(&engine, false);
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
    let src = box_name("tsrc");
    boxes
        .create(&spec(&src, &repo, &image), &Quiet)
        .expect("create");
    let commit = "git -c user.name=b -c user.email=b@example.org commit -qam";
    let spec = TournamentSpec {
        source: src.clone(),
        test: "read x < a.txt && test \"$x\" = good".into(),
        candidates: vec![
            Candidate {
                name: "bad".into(),
                command: format!("echo bad > a.txt && {commit} bad"),
            },
            Candidate {
                name: "good".into(),
                command: format!("echo good > a.txt && {commit} good"),
            },
        ],
        at: None,
        keep: true,
        keep_losers: false,
        parallel: Some(2),
        timeout: None,
        first: false,
        interrupt: Arc::new(AtomicI32::new(0)),
    };
    let result = boxes.tournament(&spec, &Quiet).expect("tournament");
    assert_eq!(result.winner.as_deref(), Some("good"), "{result:#?}");
    assert_eq!(result.candidates[0].verdict, Verdict::Failed);
    assert_eq!(result.candidates[1].verdict, Verdict::Won);
    let moved = result.moved.expect("the source moved");
    // The source holds the winner's work, on its own branch, synced to the host.
    assert_eq!(output(&boxes, &src, &["cat", "a.txt"]).1, "good\n");
    let (_, branch) = output(&boxes, &src, &["git", "symbolic-ref", "--short", "HEAD"]);
    assert_eq!(branch.trim(), format!("agentbox/{src}"));
    let (_, tip) = output(&boxes, &src, &["git", "rev-parse", "HEAD"]);
    assert_eq!(git(&repo, &["rev-parse", &format!("agentbox/{src}")]), tip);
    assert_eq!(
        moved.branches[0].tip.as_deref(),
        Some(tip.trim()),
        "{moved:?}"
    );
    // No candidate's box or container is left.
    for c in ["bad", "good"] {
        let name = format!("{src}-{c}");
        assert!(!boxes.is_box(&name), "{name}");
        assert!(engine
            .container(&names::container(&name))
            .expect("inspect")
            .is_none());
    }
    boxes.destroy(&src, true, &Quiet).expect("destroy");
}
