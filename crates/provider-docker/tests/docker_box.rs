//! The Docker provider through the façade, against a real engine (`.ci/run` starts
//! `dockerd`): a box made from a dirty repository, its commands, its history as images,
//! checkout, destroy and prune, and a create that fails leaving nothing.
//!
//! One file (over 600 lines): one box life cycle told end to end against one engine, whose tests share its fixtures.

mod common;

use agentbox_boxes::lifecycle::directories::ListedState;
use agentbox_boxes::progress::Quiet;
use agentbox_boxes::BoxError;
use agentbox_core::home::Home;
use agentbox_provider_docker::names;
use agentbox_store::fsops::ChangeKind;
use agentbox_testkit::TempHome;
use common::{
    box_name, boxes, command, dirty_repo, engine, git, leftovers, output, spec, test_image, Sweep,
};

#[test]
fn a_docker_box_runs_commands_on_its_seeded_workspace_and_keeps_its_history_as_images() {
    let test = "a_docker_box_runs_commands_on_its_seeded_workspace_and_keeps_its_history_as_images";
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
    let name = box_name("hist");
    let created = boxes
        .create(&spec(&name, &repo, &image), &Quiet)
        .expect("create");
    assert_eq!(created.record.provider, "docker");
    assert_eq!(created.record.image.as_deref(), Some(image.as_str()));
    assert_eq!(created.seeded.len(), 1, "the repository is the box's");
    let container = names::container(&name);
    assert!(engine.container(&container).expect("inspect").is_some());

    // The host's uncommitted change and untracked file are in the box, and so is the
    // repository (on the box's branch, at the host's commit).
    let (status, out) = output(&boxes, &name, &["cat", "a.txt", "u.txt"]);
    assert_eq!(
        (status, out.as_str()),
        (0, "two, then uncommitted\nuntracked\n")
    );
    let (status, out) = output(&boxes, &name, &["cat", ".git/HEAD"]);
    assert_eq!(
        (status, out.as_str()),
        (0, format!("ref: refs/heads/agentbox/{name}\n").as_str())
    );
    let host_head = git(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(
        git(&repo, &["rev-parse", &format!("agentbox/{name}")]),
        host_head
    );

    // Exit statuses are the command's, exactly; a signal is 128 + N.
    let exec = |argv: &[&str]| boxes.exec(&name, command(argv)).expect("exec");
    assert_eq!(exec(&["sh", "-c", "exit 7"]).status, 7);
    assert_eq!(exec(&["sh", "-c", "kill -9 $$"]).status, 137);
    // The image's PATH, whatever the caller's; the caller's other variables pass.
    let mut env = command(&[
        "sh",
        "-c",
        "test \"$PATH\" = /bin && test \"$GREETING\" = hi",
    ]);
    env.env = vec![
        ("PATH".into(), "/host/only/bin:/bin".into()),
        ("GREETING".into(), "hi".into()),
    ];
    assert_eq!(boxes.exec(&name, env).expect("exec").status, 0);
    // A command that cannot start fails as in a local box.
    match boxes.exec(&name, command(&["no-such-command"])) {
        Err(BoxError::Command { message, status }) => {
            assert_eq!(
                (message.as_str(), status),
                ("no-such-command: command not found in the box", 127)
            );
        }
        other => panic!("{other:?}"),
    }
    let mut elsewhere = command(&["true"]);
    elsewhere.workdir = Some(agentbox_boxes::types::Workdir::explicit("/no/such/dir"));
    match boxes.exec(&name, elsewhere) {
        Err(BoxError::Command { status, .. }) => assert_eq!(status, 2),
        other => panic!("{other:?}"),
    }
    // A default directory the box lacks falls back to its nearest existing ancestor.
    let mut nearest = command(&["sh", "-c", "test \"$PWD\" = /workspace"]);
    nearest.workdir = Some(agentbox_boxes::types::Workdir::default_for(
        "/workspace/not/here",
    ));
    assert_eq!(boxes.exec(&name, nearest).expect("exec").status, 0);
    let listed = boxes.list(None).expect("list");
    let row = listed.iter().find(|r| r.env.name == name).expect("listed");
    assert_eq!(row.state, ListedState::Running, "its container's state");

    // A process left running is the box's: listed (not the container's own), signalled.
    let sleeping = |b: &agentbox_boxes::Boxes| -> Vec<u64> {
        b.processes(&name)
            .expect("ps")
            .into_iter()
            .filter(|p| p.argv == ["sleep", "300"])
            .map(|p| p.id)
            .collect()
    };
    assert_eq!(exec(&["sh", "-c", "sleep 300 >/dev/null 2>&1 &"]).status, 0);
    let procs = boxes.processes(&name).expect("ps");
    assert_eq!(procs.len(), 1, "only the command's process: {procs:?}");
    let [sleeper] = sleeping(&boxes)[..] else {
        panic!("{procs:?}")
    };
    boxes.kill(&name, sleeper, 9).expect("kill");
    // The kill is sent; the process is gone once the box's init has reaped it.
    let mut left = sleeping(&boxes);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = sleeping(&boxes);
    }
    assert!(left.is_empty(), "{left:?}");
    assert!(matches!(
        boxes.kill(&name, 999_999, 15),
        Err(BoxError::NoSuchProcess { .. })
    ));

    let nodes = |b: &agentbox_boxes::Boxes| b.ancestors(&name, None).expect("log").nodes.len();
    assert_eq!(
        nodes(&boxes),
        1,
        "commands that change nothing make no node"
    );

    // A change makes one node, of the command.
    let wrote = exec(&["sh", "-c", "echo new > made.txt"]);
    assert_eq!(wrote.status, 0);
    let node = wrote.node.expect("a node for the change");
    let log = boxes.ancestors(&name, None).expect("log");
    assert_eq!(log.nodes.len(), 2);
    assert_eq!(log.head, node);
    assert_eq!(
        log.nodes[0].command.as_deref(),
        Some("sh -c 'echo new > made.txt'")
    );
    // Nothing changed since: no node, however often asked.
    assert_eq!(exec(&["true"]).node, None);
    assert_eq!(exec(&["cat", "made.txt"]).node, None);
    assert_eq!(nodes(&boxes), 2);
    // A file written again is listed by the engine as before: its change time tells it,
    // whatever modification time it is given.
    let again = exec(&["sh", "-c", "echo newer > made.txt"]);
    assert!(again.node.is_some(), "a file written again is a change");
    let backdated = exec(&[
        "sh",
        "-c",
        "echo newest > made.txt; touch -d '2000-01-01 00:00:00' made.txt",
    ]);
    assert!(
        backdated.node.is_some(),
        "an old modification time hides nothing"
    );
    assert_eq!(nodes(&boxes), 4);
    assert_eq!(exec(&["true"]).node, None);
    // Ignored paths are no change.
    assert_eq!(exec(&["sh", "-c", "echo x > /tmp/scratch"]).node, None);
    // What a command without capture changed is what status and diff count since HEAD.
    assert_eq!(boxes.status(&name).expect("status").changed, 0);
    let mut uncaptured = command(&["sh", "-c", "echo d > draft.txt; rm u.txt; echo m >> a.txt"]);
    uncaptured.capture = false;
    assert_eq!(boxes.exec(&name, uncaptured).expect("exec").node, None);
    let diff: Vec<(String, ChangeKind)> = boxes
        .diff(&name, "HEAD", None)
        .expect("diff")
        .into_iter()
        .map(|c| (c.path.to_string_lossy().into_owned(), c.kind))
        .collect();
    assert_eq!(
        diff,
        [
            ("workspace/a.txt".to_owned(), ChangeKind::Modified),
            ("workspace/draft.txt".to_owned(), ChangeKind::Added),
            ("workspace/u.txt".to_owned(), ChangeKind::Removed),
        ]
    );
    assert_eq!(boxes.status(&name).expect("status").changed, 3);
    // Between nodes: what their images hold, compared on the host; with content.
    let paths = |changes: Vec<agentbox_store::fsops::Change>| -> Vec<(String, ChangeKind)> {
        changes
            .into_iter()
            .map(|c| (c.path.to_string_lossy().into_owned(), c.kind))
            .collect()
    };
    let made = vec![("workspace/made.txt".to_owned(), ChangeKind::Modified)];
    assert_eq!(
        paths(boxes.diff(&name, "HEAD~1", Some("HEAD")).expect("diff")),
        made
    );
    assert_eq!(
        paths(boxes.show(&name, "HEAD").expect("show").changes),
        made
    );
    let first = boxes.ancestors(&name, None).expect("log").nodes[3]
        .id
        .clone();
    assert_eq!(
        paths(
            boxes
                .diff(&name, first.as_str(), Some("HEAD"))
                .expect("diff")
        ),
        [("workspace/made.txt".to_owned(), ChangeKind::Added)]
    );
    let between = boxes
        .diff_patch(&name, "HEAD~1", Some("HEAD"))
        .expect("diff --patch");
    assert_eq!(between.len(), 1);
    assert_eq!(
        between[0].patch.as_deref(),
        Some("--- a/workspace/made.txt\n+++ b/workspace/made.txt\n@@ -1 +1 @@\n-newer\n+newest\n")
    );
    // From HEAD to the working tree, with content.
    let patched = boxes.diff_patch(&name, "HEAD", None).expect("diff --patch");
    let texts: Vec<(String, Option<String>)> = patched
        .into_iter()
        .map(|p| (p.change.path.to_string_lossy().into_owned(), p.patch))
        .collect();
    assert_eq!(
        texts,
        [
            (
                "workspace/a.txt".to_owned(),
                Some(
                    "--- a/workspace/a.txt\n+++ b/workspace/a.txt\n@@ -1 +1,2 @@\n two, then uncommitted\n+m\n"
                        .to_owned()
                )
            ),
            (
                "workspace/draft.txt".to_owned(),
                Some("--- /dev/null\n+++ b/workspace/draft.txt\n@@ -0,0 +1 @@\n+d\n".to_owned())
            ),
            (
                "workspace/u.txt".to_owned(),
                Some("--- a/workspace/u.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-untracked\n".to_owned())
            ),
        ]
    );

    // An explicit commit is a node even when nothing changed, as for a local box.
    let explicit = boxes
        .commit(
            &name,
            agentbox_store::CommitOpts {
                message: "by hand".into(),
                command: None,
                metadata: Default::default(),
            },
        )
        .expect("commit");
    assert_eq!(explicit.message, "by hand");
    assert_eq!(nodes(&boxes), 5);
    assert_eq!(boxes.status(&name).expect("status").changed, 0);
    assert_eq!(exec(&["true"]).node, None);

    // Back to the first node: the container is made again from its image, its processes
    // killed.
    assert_eq!(exec(&["sh", "-c", "sleep 300 >/dev/null 2>&1 &"]).status, 0);
    let out = boxes.checkout(&name, "HEAD~4", false).expect("checkout");
    assert_eq!(out.node.id.as_str(), created.head);
    assert_eq!(out.killed, 1);
    assert!(sleeping(&boxes).is_empty());
    let (status, _) = output(&boxes, &name, &["test", "-e", "made.txt"]);
    assert_eq!(status, 1, "the file made after that node is gone");
    let (_, out) = output(&boxes, &name, &["cat", "a.txt"]);
    assert_eq!(out, "two, then uncommitted\n");
    assert_eq!(
        exec(&["true"]).node,
        None,
        "a fresh container has no change"
    );
    // Keeping the processes is refused by name.
    let err = boxes.checkout(&name, "HEAD", true).expect_err("refused");
    assert!(matches!(err, BoxError::ProviderCannot { .. }), "{err}");

    // Stopped and started again, the files stay.
    assert!(boxes.stop(&name).expect("stop"));
    assert!(!boxes
        .provider_of(&name)
        .expect("p")
        .is_running(&name)
        .expect("running"));
    let (status, out) = output(&boxes, &name, &["cat", "u.txt"]);
    assert_eq!((status, out.as_str()), (0, "untracked\n"));
    // Its container removed behind agentbox's back, the box's next command makes it again
    // from HEAD's image.
    let head = boxes.ancestors(&name, Some(1)).expect("log").head;
    assert!(engine.remove_container(&container).expect("remove"));
    assert!(!boxes
        .provider_of(&name)
        .expect("p")
        .is_running(&name)
        .expect("running"));
    let (status, out) = output(&boxes, &name, &["cat", "u.txt"]);
    assert_eq!((status, out.as_str()), (0, "untracked\n"));
    assert_eq!(
        exec(&["true"]).node,
        None,
        "the remade container is at HEAD"
    );
    assert_eq!(boxes.ancestors(&name, Some(1)).expect("log").head, head);

    // Destroyed: the container goes at once; its images once GC freed their nodes and
    // prune removed them.
    let (_, images) = leftovers(&engine, &home);
    assert!(images.len() >= 4, "a node image per node: {images:?}");
    boxes.destroy(&name, true, &Quiet).expect("destroy");
    assert!(engine.container(&container).expect("inspect").is_none());
    boxes.gc().expect("gc");
    let pruned = boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    let kept: Vec<_> = pruned
        .boxes
        .iter()
        .filter(|l| l.outcome != agentbox_boxes::types::PruneOutcome::Removed)
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    assert!(
        engine.image(&image).expect("inspect").is_some(),
        "the base image stays"
    );
    assert!(
        git(
            &repo,
            &["for-each-ref", &format!("refs/heads/agentbox/{name}")]
        )
        .is_empty(),
        "the box's branch was deleted with it"
    );
}

#[test]
fn a_create_that_fails_leaves_nothing_on_either_side() {
    let test = "a_create_that_fails_leaves_nothing_on_either_side";
    let Some(engine) = engine(test) else { return };
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
    let name = box_name("nothing");
    let missing = "agentbox-test-missing:never";
    let err = boxes
        .create(&spec(&name, &repo, missing), &Quiet)
        .expect_err("no such image");
    let text = err.to_string();
    assert!(
        text.contains(missing) && text.contains("unix:///var/run/docker.sock"),
        "{text}"
    );
    let hint = err.hint().unwrap_or_default();
    assert!(
        hint.contains("docker pull") && hint.contains("agentbox image build"),
        "{hint}"
    );
    assert!(engine
        .container(&names::container(&name))
        .expect("inspect")
        .is_none());
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    assert!(!boxes.is_box(&name));
    assert!(boxes.store().map(|s| s.env(&name).is_err()).unwrap_or(true));
    assert_eq!(git(&repo, &["for-each-ref"]), refs_before);

    // A failure after the container was made (the start the workspace should be seeded
    // from does not exist) removes it again, and touches no host ref.
    let mut bad_ref = spec(&name, &repo, &test_image(&engine));
    bad_ref.from_ref = Some("no-such-ref".into());
    let err = boxes.create(&bad_ref, &Quiet).expect_err("no such ref");
    assert!(err.to_string().contains("no-such-ref"), "{err}");
    assert!(engine
        .container(&names::container(&name))
        .expect("inspect")
        .is_none());
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    assert!(!boxes.is_box(&name));
    assert_eq!(git(&repo, &["for-each-ref"]), refs_before);

    // Published ports are not done yet: refused by name, before anything is made.
    let mut published = spec(&name, &repo, &test_image(&engine));
    published.settings.network = Some("private".into());
    published.settings.publish = vec!["18080:80".into()];
    let err = boxes.create(&published, &Quiet).expect_err("refused");
    assert!(matches!(err, BoxError::ProviderCannot { .. }), "{err}");
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));

    // A box without an image at all is refused before anything is made.
    let mut no_image = spec(&name, &repo, "unused");
    no_image.settings.image = None;
    let err = boxes.create(&no_image, &Quiet).expect_err("no image");
    assert!(err.to_string().contains("box.image"), "{err}");
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    assert_eq!(git(&repo, &["for-each-ref"]), refs_before);
}

#[test]
fn a_box_from_a_dockerfile_runs_on_the_image_built_once_under_its_fingerprint() {
    let test = "a_box_from_a_dockerfile_runs_on_the_image_built_once_under_its_fingerprint";
    let Some(engine) = engine(test) else { return };
    let base = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let project = tmp.path().join("project");
    fs_err::create_dir_all(&project).expect("project");
    fs_err::write(project.join("plain.txt"), "no repository here\n").expect("write");
    let build = tmp.path().join("build");
    fs_err::create_dir_all(&build).expect("build");
    // The fingerprint covers the context: a file of this test's own makes the image this
    // test's, removed at its end.
    let own = format!("{test} {}\n", std::process::id());
    fs_err::write(build.join("stamp"), &own).expect("stamp");
    fs_err::write(
        build.join("Dockerfile"),
        format!("FROM {base}\nCOPY stamp /stamp\n"),
    )
    .expect("dockerfile");
    let boxes = boxes(&home);
    let built = boxes
        .build_image("docker", &build.join("Dockerfile"), None, &Quiet)
        .expect("build");
    assert!(built.starts_with("agentbox-image:"), "{built}");
    let name = box_name("built");
    let mut s = spec(&name, &project, "unused");
    s.settings.image = None;
    s.dockerfile = Some(build.join("Dockerfile"));
    let created = boxes.create(&s, &Quiet).expect("create");
    assert_eq!(created.record.image.as_deref(), Some(built.as_str()));
    assert!(created.seeded.is_empty(), "a plain directory is copied");
    let (_, out) = output(&boxes, &name, &["cat", "/stamp", "plain.txt"]);
    assert_eq!(out, format!("{own}no repository here\n"));
    boxes.destroy(&name, true, &Quiet).expect("destroy");
    boxes.gc().expect("gc");
    boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    // The built image stays for the boxes still to be made from it; only its box's went.
    let (containers, images) = leftovers(&engine, &home);
    assert!(containers.is_empty());
    let built_id = engine.image(&built).expect("inspect").expect("kept").id;
    assert_eq!(images, [built_id]);
    assert!(engine.remove_image(&built).expect("remove the built image"));
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
}

#[test]
fn freed_nodes_images_are_removed_by_prune_once_no_container_runs_on_them() {
    let test = "freed_nodes_images_are_removed_by_prune_once_no_container_runs_on_them";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let project = tmp.path().join("project");
    fs_err::create_dir_all(&project).expect("project");
    let boxes = boxes(&home);
    let name = box_name("freed");
    let mut s = spec(&name, &project, &image);
    s.settings.keep = Some(2);
    boxes.create(&s, &Quiet).expect("create");
    let write = |i: usize| {
        let wrote = boxes
            .exec(&name, command(&["sh", "-c", &format!("echo {i} > f{i}")]))
            .expect("exec");
        assert!(wrote.node.is_some());
    };
    let removed = agentbox_boxes::types::PruneOutcome::Removed;
    // Retention (box.keep 2) thins automatic nodes: GC frees them, prune their images.
    for i in 0..4 {
        write(i);
    }
    let store = boxes.store().expect("store");
    let image_of =
        |n: &agentbox_store::Node| store.held_of(n).expect("held").expect("a held node").object;
    let kept = boxes.ancestors(&name, None).expect("log").nodes;
    assert!(
        kept.len() < 5,
        "retention thinned the history: {}",
        kept.len()
    );
    boxes.gc().expect("gc");
    let pruned = boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert!(!pruned.boxes.is_empty());
    for l in &pruned.boxes {
        assert_eq!((l.kind.as_str(), &l.outcome), ("image", &removed), "{l:?}");
        assert!(engine.image(&l.target).expect("inspect").is_none());
    }
    for n in &kept {
        assert!(engine.image(&image_of(n)).expect("inspect").is_some());
    }

    // A node the box's container runs on (it was checked out) and that is then deleted:
    // its image stays, saying why, until the container is made again.
    boxes.checkout(&name, "HEAD~1", false).expect("checkout");
    let under = boxes.ancestors(&name, Some(1)).expect("log").nodes[0].clone();
    let under_image = image_of(&under);
    write(9);
    boxes.delete_node(&name, under.id.as_str()).expect("delete");
    boxes.gc().expect("gc");
    let pruned = boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    let [l] = &pruned.boxes[..] else {
        panic!("{pruned:?}")
    };
    assert_eq!(l.target, under_image);
    assert!(
        matches!(&l.outcome, agentbox_boxes::types::PruneOutcome::Kept(why) if why.contains("runs on it")),
        "{l:?}"
    );
    boxes.checkout(&name, "HEAD", false).expect("checkout");
    let pruned = boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert!(
        pruned.boxes.iter().all(|l| l.outcome == removed),
        "{pruned:?}"
    );
    // Its tag is gone; its data stays only as the parent of a later node's image.
    let left = engine.image(&under_image).expect("inspect");
    assert!(left.as_ref().is_none_or(|i| i.tags.is_empty()), "{left:?}");
    let (_, out) = output(&boxes, &name, &["cat", "f9"]);
    assert_eq!(out, "9\n");
}

#[test]
fn a_project_of_sub_repositories_is_seeded_each_on_its_branch_and_the_rest_copied() {
    let test = "a_project_of_sub_repositories_is_seeded_each_on_its_branch_and_the_rest_copied";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let project = tmp.path().join("mono");
    let sub = project.join("svc");
    fs_err::create_dir_all(&sub).expect("sub");
    fs_err::write(project.join("notes.txt"), "plain\n").expect("write");
    dirty_repo(&sub);
    let boxes = boxes(&home);
    let name = box_name("mono");
    let created = boxes
        .create(&spec(&name, &project, &image), &Quiet)
        .expect("create");
    assert_eq!(created.seeded.len(), 1);
    assert_eq!(created.seeded[0].record.sub.as_deref(), Some("svc"));
    let branch = format!("agentbox/{name}--svc");
    assert_eq!(created.seeded[0].record.branch, branch);
    let (_, out) = output(
        &boxes,
        &name,
        &[
            "cat",
            "notes.txt",
            "svc/a.txt",
            "svc/u.txt",
            "svc/.git/HEAD",
        ],
    );
    assert_eq!(
        out,
        format!("plain\ntwo, then uncommitted\nuntracked\nref: refs/heads/{branch}\n")
    );
    assert_eq!(
        git(&sub, &["rev-parse", &branch]),
        git(&sub, &["rev-parse", "HEAD"])
    );
    boxes.destroy(&name, true, &Quiet).expect("destroy");
}

/// A container made to read a node (for `diff` between nodes) that a crash left behind is
/// the home's but no box's: prune removes it, and only it.
#[test]
fn a_look_at_a_node_left_by_a_crash_is_removed_by_prune() {
    let test = "a_look_at_a_node_left_by_a_crash_is_removed_by_prune";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let dir = tmp.path().join("plain");
    fs_err::create_dir_all(&dir).expect("dir");
    fs_err::write(dir.join("f.txt"), "x\n").expect("write");
    let boxes = boxes(&home);
    let name = box_name("look");
    let created = boxes
        .create(&spec(&name, &dir, &image), &Quiet)
        .expect("create");
    let store = agentbox_store::Store::open(&home.store_dir()).expect("store");
    let node = store
        .node(&store.resolve(&name, "HEAD").expect("HEAD"))
        .expect("node");
    assert_eq!(node.id.as_str(), created.head);
    let held = store.held_of(&node).expect("held").expect("an image");
    let provider = agentbox_provider_docker::DockerProvider::new(home.clone());
    let look =
        agentbox_provider_docker::manifest::Look::new(&provider, &engine, &name, &held.object)
            .expect("look");
    let left = look.container.clone();
    // As a crash would: never removed by its owner.
    std::mem::forget(look);
    let (containers, _) = leftovers(&engine, &home);
    assert_eq!(containers.len(), 2, "{containers:?}");
    let pruned = boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    let removed: Vec<&str> = pruned
        .boxes
        .iter()
        .filter(|l| l.kind == "container")
        .map(|l| l.target.as_str())
        .collect();
    assert_eq!(removed, [left.as_str()]);
    let (containers, _) = leftovers(&engine, &home);
    assert_eq!(containers, [names::container(&name)]);
    boxes.destroy(&name, true, &Quiet).expect("destroy");
}
