//! Checkpoints of a Docker box through the façade, against a real engine: a checkpoint is
//! an image `agentbox-ckpt-<project key>:<name>` made from a capture of the box (the box
//! untouched), cleaned (the cleanup command, temporary files, histories, credential
//! files), layered or flattened (a flattened image keeps the configuration an export
//! drops); a box made from it starts warm on a fresh branch at the host's commit, with the
//! host's work carried over and the checkpoint's untracked files kept (box wins, the
//! collision reported); `rm` removes the tag, `prune` the image GC released; export is
//! refused by name, and so is a local box from a Docker checkpoint.

mod common;

use agentbox_boxes::checkpoints::checkpoint::{project_key, CheckpointKind, CheckpointSpec};
use agentbox_boxes::config::key::Value;
use agentbox_boxes::config::layers::{layer_path, set_in, Layer};
use agentbox_boxes::lifecycle::create::Spec;
use agentbox_boxes::progress::Quiet;
use agentbox_boxes::records::record;
use agentbox_boxes::BoxError;
use agentbox_core::home::Home;
use agentbox_provider_docker::names;
use agentbox_testkit::TempHome;
use common::{box_name, boxes, engine, git, git_busybox_image, output, spec, Sweep};

/// A box image with configuration of its own (what a flattened checkpoint must keep):
/// the git test image exported and imported again with `ENV`, `EXPOSE`, `USER`,
/// `WORKDIR` and `CMD`.
fn configured_image(engine: &agentbox_docker::Engine, tmp: &std::path::Path) -> String {
    let base = git_busybox_image(engine);
    let c = format!("agentbox-test-export-{}", std::process::id());
    engine
        .create_container(&agentbox_docker::container::ContainerSpec {
            name: c.clone(),
            image: base,
            cmd: vec!["true".into()],
            ..Default::default()
        })
        .expect("create");
    let tar = tmp.join("export.tar");
    engine.export_container(&c, &tar).expect("export");
    engine.remove_container(&c).expect("remove");
    let tag = format!("t{}", std::process::id());
    engine
        .import_rootfs(
            &tar,
            "agentbox-test-configured",
            &tag,
            &[
                "ENV PATH=/usr/bin:/bin".into(),
                r#"ENV FOO="a b \$x""#.into(),
                "EXPOSE 8080/tcp".into(),
                "USER 0".into(),
                "WORKDIR /workspace".into(),
                r#"CMD ["sh"]"#.into(),
            ],
        )
        .expect("import");
    format!("agentbox-test-configured:{tag}")
}

#[test]
fn a_docker_box_checkpoint_is_an_image_new_boxes_start_from_warm_on_a_fresh_branch() {
    let test = "a_docker_box_checkpoint_is_an_image_new_boxes_start_from_warm_on_a_fresh_branch";
    let Some(engine) = engine(test) else { return };
    let tmp = TempHome::new();
    let image = configured_image(&engine, tmp.path());
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    fs_err::write(repo.join(".gitignore"), "deps/\n").expect("write");
    fs_err::write(repo.join("a.txt"), "one\n").expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    let boxes = boxes(&home);
    let src = box_name("csrc");
    // A variable of the box's own, which a checkpoint (its project's) must not carry.
    let mut src_spec = spec(&src, &repo, &image);
    src_spec.settings.env = vec!["SECRET=s3cret".into()];
    boxes.create(&src_spec, &Quiet).expect("create");
    // The warm state (ignored), a generated file (untracked), a change to a tracked file,
    // and what the cleanup removes or empties.
    let (st, out) = output(
        &boxes,
        &src,
        &[
            "sh",
            "-c",
            "mkdir -p deps && echo warm > deps/lib.txt && echo gen > generated.txt \
             && echo box > a.txt && echo junk > /tmp/junk && mkdir -p /root && echo secret > /root/.netrc \
             && echo history > /root/.bash_history",
        ],
    );
    assert_eq!(st, 0, "{out}");
    let global = layer_path(&home, None, Layer::Global).expect("global layer");
    set_in(
        &global,
        "checkpoint.cleanupCommand",
        &Value::Str("echo ran > /cleaned; echo said; exit 3".into()),
    )
    .expect("config");

    let warm = boxes
        .checkpoint_create(&CheckpointSpec {
            box_name: src.clone(),
            name: Some("warm".into()),
            ..Default::default()
        })
        .expect("checkpoint");
    let m = &warm.manifest;
    let project = record::read(&home, &src).expect("record").project;
    let tag = format!(
        "{}:warm",
        names::checkpoint_repo(&project_key(project.as_deref()))
    );
    assert_eq!(m.kind, CheckpointKind::Layered);
    assert_eq!(m.provider.as_deref(), Some("docker"));
    let held = m.held.clone().expect("held");
    assert_eq!(held.image, tag);
    let info = engine.image(&tag).expect("inspect").expect("the tag");
    assert_eq!(info.id, held.image_id);
    assert_eq!(
        info.labels.get(names::CHECKPOINT_LABEL).map(String::as_str),
        Some("warm")
    );
    let env = engine.run_config(&tag).expect("config").env;
    assert!(env.contains(&"SECRET=".to_owned()), "{env:?}");
    assert!(!env.iter().any(|e| e.contains("s3cret")), "{env:?}");
    let failed = m
        .cleaned
        .command_failed
        .clone()
        .expect("the command failed");
    assert!(
        failed.contains("status 3") && failed.contains("said"),
        "{failed}"
    );
    assert!(m.cleaned.deleted >= 2, "{:?}", m.cleaned);
    // The box itself is untouched.
    assert_eq!(output(&boxes, &src, &["cat", "/tmp/junk"]).1, "junk\n");
    assert_eq!(output(&boxes, &src, &["cat", "/root/.netrc"]).1, "secret\n");
    assert_ne!(output(&boxes, &src, &["cat", "/cleaned"]).0, 0);

    // The host moves on: a commit, an uncommitted change, and an untracked file where
    // the checkpoint has its own.
    fs_err::write(repo.join("b.txt"), "b\n").expect("write");
    git(&repo, &["add", "b.txt"]);
    git(&repo, &["commit", "-qm", "second"]);
    fs_err::write(repo.join("a.txt"), "host edit\n").expect("write");
    fs_err::write(repo.join("generated.txt"), "host's own\n").expect("write");
    let host_head = git(&repo, &["rev-parse", "HEAD"]);

    let new = box_name("cnew");
    let made = boxes
        .create(
            &Spec {
                checkpoint: Some("warm".into()),
                no_checkpoint: false,
                provider: None,
                ..spec(&new, &repo, &image)
            },
            &Quiet,
        )
        .expect("create from the checkpoint");
    assert_eq!(made.record.provider, "docker");
    assert_eq!(made.record.checkpoint.as_deref(), Some("warm"));
    assert_eq!(made.record.resync_conflicts, ["generated.txt"]);
    let store = boxes.store().expect("store");
    let first = store.node(&made.head).expect("head");
    assert_eq!(
        first.parent.as_ref().map(|p| p.as_str()),
        Some(m.node.as_str()),
        "its history starts at the checkpoint"
    );
    let read = |p: &str| output(&boxes, &new, &["cat", p]);
    assert_eq!(read("deps/lib.txt").1, "warm\n");
    assert_eq!(read("generated.txt").1, "gen\n", "the box's copy wins");
    assert_eq!(read("a.txt").1, "host edit\n");
    assert_eq!(read("b.txt").1, "b\n");
    assert_eq!(read("/cleaned").1, "ran\n");
    assert_ne!(read("/tmp/junk").0, 0);
    assert_ne!(read("/root/.netrc").0, 0);
    assert_eq!(read("/root/.bash_history").1, "");
    let (_, branch) = output(&boxes, &new, &["git", "symbolic-ref", "--short", "HEAD"]);
    assert_eq!(branch.trim(), format!("agentbox/{new}"));
    let (_, head) = output(&boxes, &new, &["git", "rev-parse", "HEAD"]);
    assert_eq!(head, host_head);
    let (_, status) = output(&boxes, &new, &["git", "status", "--porcelain"]);
    assert_eq!(status, " M a.txt\n?? generated.txt\n", "deps/ is ignored");

    // Flattened: self-contained, with the configuration the export dropped.
    let flat = boxes
        .checkpoint_create(&CheckpointSpec {
            box_name: src.clone(),
            name: Some("flat".into()),
            merged: true,
            ..Default::default()
        })
        .expect("flattened checkpoint");
    assert_eq!(flat.manifest.kind, CheckpointKind::Flattened);
    let flat_held = flat.manifest.held.clone().expect("held");
    let node = store.node(&flat.manifest.node).expect("node");
    let from = node.detached.expect("detached").from;
    let node_image = store
        .held_of(&store.node(from.as_str()).expect("from"))
        .expect("held")
        .expect("an image")
        .object;
    let config = engine.run_config(&flat_held.image).expect("config");
    let mut node_config = engine.run_config(&node_image).expect("config");
    assert!(node_config.env.contains(&"SECRET=s3cret".to_owned()));
    for e in &mut node_config.env {
        if e.starts_with("SECRET=") {
            *e = "SECRET=".into();
        }
    }
    assert_eq!(
        config, node_config,
        "the node's, less the box's own variable"
    );
    assert!(config.env.contains(&"FOO=a b $x".to_owned()), "{config:?}");
    assert_eq!(config.exposed_ports, ["8080/tcp"]);
    assert_eq!(config.user.as_deref(), Some("0"));
    assert_eq!(config.workdir.as_deref(), Some("/workspace"));

    let listed = boxes
        .checkpoints(project.as_deref(), false)
        .expect("checkpoints");
    let names_listed: Vec<&str> = listed.iter().map(|c| c.manifest.name.as_str()).collect();
    assert_eq!(names_listed, ["warm", "flat"]);
    assert!(listed.iter().all(|c| c.state.as_str() == "fresh"));

    // Moved as a file: its manifest and its image (see `docker_checkpoint_file` in the
    // command line's tests for the import).
    let out = tmp.path().join("warm.ckpt");
    let exported = boxes
        .checkpoint_export(project.as_deref(), "warm", &out)
        .expect("export");
    assert_eq!(exported.bytes, fs_err::metadata(&out).expect("file").len());
    // Refused by name: a local box from it.
    let local = boxes.create(
        &Spec {
            checkpoint: Some("warm".into()),
            no_checkpoint: false,
            provider: Some("local".into()),
            ..spec(&box_name("clocal"), &repo, &image)
        },
        &Quiet,
    );
    assert!(
        matches!(&local, Err(BoxError::BadSetting { key, .. }) if key == "--checkpoint"),
        "{local:?}"
    );

    // `rm` removes the tag; once GC released its node, `prune` removes the image.
    boxes
        .checkpoint_remove(project.as_deref(), "flat")
        .expect("rm");
    assert!(engine.image(&flat_held.image).expect("inspect").is_none());
    boxes.gc().expect("gc");
    boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert!(engine
        .image(&flat_held.image_id)
        .expect("inspect")
        .is_none());
    // The box made from the checkpoint is no leftover: prune left its container.
    assert!(engine
        .container(&names::container(&new))
        .expect("inspect")
        .is_some());
    assert_eq!(read("deps/lib.txt").1, "warm\n");
    // The layered one's image stays while the box made from it and its ref name it.
    assert!(engine.image(&held.image_id).expect("inspect").is_some());
    for b in [&new, &src] {
        boxes.destroy(b, true, &Quiet).expect("destroy");
    }
    let _ = engine.remove_image(&image);
}
