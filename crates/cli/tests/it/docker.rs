//! Docker boxes through the binary (a real engine: `.ci/run` starts `dockerd`): `create
//! --provider docker` from a dirty repository, `exec` with its exact output and status,
//! `log`, `status` (without a local box's lines), `spawn`/`logs`/`ps`/`kill`, `checkout`,
//! `destroy`, `gc` and `prune` leaving nothing on the engine. The provider's own behaviours are tested in its
//! crate (`crates/provider-docker/tests`).

use agentbox_core::Home;
use agentbox_docker::endpoint::{Endpoint, Origin, DEFAULT_HOST};
use agentbox_docker::Engine;
use agentbox_provider_docker::names;
use agentbox_testkit::tier;

use crate::common::{code, git, log_ids, stderr, write, Env};

pub(crate) fn engine(test: &str) -> Option<Engine> {
    if !tier::require_root(test)
        || !tier::require_docker(test)
        || !tier::require_tool(test, "busybox")
    {
        return None;
    }
    let ep = Endpoint {
        host: DEFAULT_HOST.into(),
        origin: Origin::Default,
        tls: None,
    };
    Some(Engine::connect(ep).expect("connect to the local engine"))
}

pub(crate) fn test_image(engine: &Engine) -> String {
    agentbox_testkit::busybox_image::busybox_image(
        |name| engine.image(name).expect("inspect").is_some(),
        |tar, repo, tag, changes| {
            engine
                .import_rootfs(tar, repo, tag, changes)
                .expect("import");
        },
    )
}

/// The containers and images of home `home` on `engine`.
pub(crate) fn on_engine(engine: &Engine, home: &Home) -> (usize, usize) {
    let key = names::home_key(home);
    (
        engine
            .containers_labelled(names::HOME_LABEL, &key)
            .expect("containers")
            .len(),
        engine
            .images_labelled(names::HOME_LABEL, &key)
            .expect("images")
            .len(),
    )
}

/// Everything of `home` on `engine`, removed when dropped (a failed test leaves nothing).
pub(crate) struct Sweep<'a>(pub(crate) &'a Engine, pub(crate) Home);

impl Drop for Sweep<'_> {
    fn drop(&mut self) {
        let key = names::home_key(&self.1);
        for c in self
            .0
            .containers_labelled(names::HOME_LABEL, &key)
            .unwrap_or_default()
        {
            let _ = self.0.remove_container(&c.name);
        }
        for i in self
            .0
            .images_labelled(names::HOME_LABEL, &key)
            .unwrap_or_default()
        {
            let _ = agentbox_provider_docker::prune::remove_node_image(self.0, &i.id);
        }
    }
}

#[test]
fn a_docker_box_through_the_command_line() {
    let test = "a_docker_box_through_the_command_line";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let env = Env::new();
    let home = Home::at(env.path("home"));
    let _sweep = Sweep(&engine, home.clone());
    let project = env.path("project");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    write(&project.join("a.txt"), "one, uncommitted\n");
    let name = format!("cli-{}", std::process::id());
    let made = env.run_in(
        &project,
        &["create", "--provider", "docker", "--image", &image, &name],
    );
    assert!(made.contains(&format!("box \"{name}\"")), "{made}");

    let out = env.run(&[
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        "cat a.txt; echo err >&2; exit 5",
    ]);
    assert_eq!(code(&out), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one, uncommitted\n");
    assert_eq!(stderr(&out), "err\n");
    let out = env.run(&["exec", &name, "--", "sh", "-c", "echo two > b.txt"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(log_ids(&env.json(&["log", &name])).len(), 2);
    let status = env.json(&["status", &name]);
    assert_eq!(status["box"]["state"], "running", "{status}");
    env.ok(&["checkout", &name, "HEAD~1"]);
    let out = env.run(&["exec", &name, "--", "cat", "b.txt"]);
    assert_ne!(code(&out), Some(0), "b.txt is gone with the checkout");

    // Its status has no line of a box in this host's sandbox (watcher, in-memory mounts,
    // box root, the store's disk), in both forms; its network is the engine's.
    let human = env.ok(&["status", &name]);
    for local in [
        "box root:",
        "in memory:",
        "watching",
        "box disk:",
        "host root",
    ] {
        assert!(!human.contains(local), "{local:?} in:\n{human}");
    }
    assert!(
        human.contains("network:      the Docker engine's default network"),
        "{human}"
    );
    let status = env.json(&["status", &name]);
    for local in ["box_root", "scratch", "capture_state"] {
        assert!(status["box"].get(local).is_none(), "{local} in {status}");
    }

    // A background process: started by id, its log, `ps`, `kill` by id.
    let started = env.json(&[
        "spawn",
        &name,
        "--",
        "sh",
        "-c",
        "echo from-the-box; exec sleep 300",
    ]);
    let id = started["id"].as_u64().expect("id");
    assert_eq!(started["log"], format!("/var/log/agentbox/{id}.log"));
    let mut logged = String::new();
    while logged.is_empty() {
        logged = env.ok(&["logs", &name, &id.to_string()]);
    }
    assert_eq!(logged, "from-the-box\n");
    let ps = env.ok(&["ps", &name]);
    assert!(
        ps.lines().any(|l| l.starts_with(&format!("{id} "))
            && l.contains("spawn")
            && l.contains("running")),
        "{ps}"
    );
    env.ok(&["kill", &name, &id.to_string(), "--signal", "TERM"]);
    // `logs -f` returns once the process has ended.
    assert_eq!(
        env.ok(&["logs", &name, &id.to_string(), "-f"]),
        "from-the-box\n"
    );
    let ps = env.json(&["ps", &name]);
    let ended = ps
        .as_array()
        .expect("list")
        .iter()
        .find(|p| p["id"] == id)
        .expect("listed");
    assert_eq!(ended["exit"]["status"], 143, "{ps}");
    let out = env.run(&["logs", &name, "99"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has no log for process 99"),
        "{}",
        stderr(&out)
    );

    // A named engine (`docker.hosts`) is where `--docker-host NAME` puts a box; a name
    // not configured is refused, saying which are.
    env.ok(&["config", "set", "docker.hosts.here", DEFAULT_HOST]);
    let named = format!("{name}-named");
    env.run_in(
        &project,
        &[
            "create",
            "--provider",
            "docker",
            "--image",
            &image,
            "--docker-host",
            "here",
            &named,
        ],
    );
    let out = env.run(&["exec", &named, "--", "cat", "a.txt"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one, uncommitted\n");
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(env.path(&format!("home/boxes/{named}/box.json"))).expect("record"),
    )
    .expect("json");
    assert_eq!(record["engine"], "here");
    let out = env
        .command(&[
            "create",
            "--provider",
            "docker",
            "--image",
            &image,
            "--docker-host",
            "nowhere",
        ])
        .current_dir(&project)
        .output()
        .expect("run agentbox");
    assert_ne!(code(&out), Some(0));
    assert!(
        stderr(&out).contains("no Docker host named \"nowhere\" (known: here)"),
        "{}",
        stderr(&out)
    );
    env.ok(&["destroy", &named]);
    // One the user names for this project only (their layer of the project) works from it.
    env.run_in(
        &project,
        &["config", "set", "docker.hosts.there", DEFAULT_HOST],
    );
    let there = format!("{name}-there");
    env.run_in(
        &project,
        &[
            "create",
            "--provider",
            "docker",
            "--image",
            &image,
            "--docker-host",
            "there",
            &there,
        ],
    );
    let out = env.run(&["exec", &there, "--", "cat", "a.txt"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one, uncommitted\n");
    env.ok(&["destroy", &there]);

    env.ok(&["destroy", &name]);
    env.ok(&["gc"]);
    env.ok(&["prune"]);
    assert_eq!(on_engine(&engine, &home), (0, 0));
}
