//! Docker boxes on a remote engine, for real (tier 2): a second `dockerd` in a network
//! namespace of the test's own (`agentbox_testkit::remote_docker`), reached over `tcp://`
//! with mutual TLS (as a named host of the configuration, `docker.hosts.NAME`) and over
//! `ssh://`. A box made there from a dirty repository runs commands, its commit reaches
//! the host's branch by sync, and once destroyed nothing of it is left on either side.

mod common;

use agentbox_boxes::progress::Quiet;
use agentbox_boxes::records::record;
use agentbox_boxes::BoxError;
use agentbox_core::home::Home;
use agentbox_docker::endpoint::{Endpoint, Origin};
use agentbox_docker::Engine;
use agentbox_testkit::{remote_docker, TempHome};
use common::{
    box_name, boxes, command, dirty_repo, git, leftovers, output, spec, tools_image, Sweep,
};

/// A box's life on the remote engine `via` (a `--docker-host`: a URL or a configured
/// name), `seen` being the same engine through its socket.
fn a_box_lives_on(via: &str, seen: &Engine, tag: &str) {
    let image = tools_image(seen, false);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    fs_err::create_dir_all(home.root()).expect("home");
    let _sweep = Sweep {
        engine: seen,
        home: home.clone(),
    };
    // The named host: the fixture's TLS port.
    let tls = seen_tls_host();
    fs_err::write(
        home.root().join("config.yaml"),
        format!("docker:\n  hosts:\n    far: {tls}\n"),
    )
    .expect("config");
    let config = agentbox_boxes::config::Config::load(&home, None).expect("config");
    assert_eq!(
        config
            .effective()
            .docker_hosts
            .get("far")
            .map(String::as_str),
        Some(tls.as_str())
    );
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let boxes = boxes(&home);
    let name = box_name(tag);
    let mut s = spec(&name, &repo, &image);
    s.engine = Some(via.to_owned());
    let created = boxes.create(&s, &Quiet).expect("create");
    assert_eq!(created.record.engine.as_deref(), Some(via));
    assert!(
        seen.container(&agentbox_provider_docker::names::container(&name))
            .expect("inspect")
            .is_some(),
        "the box is on the remote engine"
    );

    // The host's uncommitted and untracked work came over the connection.
    let (st, out) = output(&boxes, &name, &["cat", "a.txt", "u.txt"]);
    assert_eq!(
        (st, out.as_str()),
        (0, "two, then uncommitted\nuntracked\n")
    );

    // A node, and what changed since the first one: read through the remote engine.
    let made = boxes
        .exec(&name, command(&["sh", "-c", "echo far > r.txt"]))
        .expect("exec");
    assert!(made.node.is_some());
    let changed = boxes
        .diff_patch(&name, "HEAD~1", Some("HEAD"))
        .expect("diff --patch");
    let got: Vec<(String, agentbox_store::fsops::ChangeKind, Option<String>)> = changed
        .into_iter()
        .map(|p| {
            (
                p.change.path.to_string_lossy().into_owned(),
                p.change.kind,
                p.patch,
            )
        })
        .collect();
    assert_eq!(
        got,
        [(
            "workspace/r.txt".to_owned(),
            agentbox_store::fsops::ChangeKind::Added,
            Some("--- /dev/null\n+++ b/workspace/r.txt\n@@ -0,0 +1 @@\n+far\n".to_owned())
        )]
    );

    // A commit in the box reaches the host's branch.
    let (st, out) = output(
        &boxes,
        &name,
        &[
            "git",
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.org",
            "commit",
            "-q",
            "-am",
            "remote work",
        ],
    );
    assert_eq!(st, 0, "{out}");
    let (_, tip) = output(&boxes, &name, &["git", "rev-parse", "HEAD"]);
    let rec = record::read(&home, &name).expect("record");
    let synced = boxes.sync(&rec).expect("sync");
    assert_eq!(synced[0].tip.as_deref(), Some(tip.trim()));
    let branch = format!("agentbox/{name}");
    assert_eq!(git(&repo, &["rev-parse", &branch]).trim(), tip.trim());
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", &branch]).trim(),
        "remote work"
    );

    // Destroyed: nothing left on the engine (container, node images) nor in the host
    // repository (branch, pins, fetched refs).
    boxes.destroy(&name, true, &Quiet).expect("destroy");
    boxes.gc().expect("gc");
    boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert_eq!(leftovers(seen, &home), (Vec::new(), Vec::new()));
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(refs.trim(), "refs/heads/main", "{refs}");
}

/// The fixture's TLS URL, set by the test that started it.
fn seen_tls_host() -> String {
    std::env::var("AGENTBOX_TEST_REMOTE_TLS").expect("set by the test")
}

#[test]
fn docker_boxes_live_on_a_remote_engine_over_tls_by_name_and_over_ssh() {
    let test = "docker_boxes_live_on_a_remote_engine_over_tls_by_name_and_over_ssh";
    if !agentbox_testkit::tier::require_tool(test, "git") {
        return;
    }
    let Some(f) = remote_docker::shared(test) else {
        return;
    };
    let seen = Engine::connect(Endpoint {
        host: f.unix_host(),
        origin: Origin::Given,
        tls: None,
    })
    .expect("connect to the fixture's socket");
    // TLS as the docker CLI finds it; this test process is alone in its environment.
    std::env::set_var("DOCKER_TLS_VERIFY", "1");
    std::env::set_var("DOCKER_CERT_PATH", f.client_certs());
    std::env::set_var("AGENTBOX_TEST_REMOTE_TLS", f.tcp_host());

    a_box_lives_on("far", &seen, "far");
    a_box_lives_on(&f.ssh_host(), &seen, "ssh");

    // A name no configuration gives is refused, naming the ones it knows.
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    fs_err::create_dir_all(home.root()).expect("home");
    fs_err::write(
        home.root().join("config.yaml"),
        format!("docker:\n  hosts:\n    far: {}\n", f.tcp_host()),
    )
    .expect("config");
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let mut s = spec(&box_name("nowhere"), &repo, "unused");
    s.engine = Some("nowhere".into());
    match boxes(&home).create(&s, &Quiet) {
        Err(BoxError::Remote { message, .. }) => {
            assert!(message.contains("nowhere"), "{message}");
            assert!(message.contains("far"), "{message}");
        }
        other => panic!("{:?}", other.map(|c| c.record.name)),
    }
    assert_eq!(
        git(&repo, &["for-each-ref", "--format=%(refname)"]).trim(),
        "refs/heads/main"
    );
}
