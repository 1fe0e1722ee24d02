//! The engine client against a real Docker engine (tier 2: `.ci/run` starts `dockerd`).
//! No image can be pulled: the tests import their own, a root filesystem of the host's
//! static busybox.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use agentbox_docker::container::{ContainerSpec, Limits, BOX_CAPS};
use agentbox_docker::endpoint::{resolve, Endpoint, Lookup, Origin};
use agentbox_docker::exec::{pack_size, ExecSpec};
use agentbox_docker::{DockerError, Engine};
use agentbox_testkit::tier;
use common::{run, running, test_image, Running, LABEL};

fn engine(test: &str) -> Option<Engine> {
    if !tier::require_root(test)
        || !tier::require_docker(test)
        || !tier::require_tool(test, "busybox")
    {
        return None;
    }
    let ep = Endpoint {
        host: "unix:///var/run/docker.sock".into(),
        origin: Origin::Default,
        tls: None,
    };
    Some(Engine::connect(ep).expect("connect to the local engine"))
}

#[test]
fn a_command_gets_its_exact_argv_stdin_and_separate_output_and_its_status() {
    let test = "a_command_gets_its_exact_argv_stdin_and_separate_output_and_its_status";
    let Some(engine) = engine(test) else { return };
    assert!(engine.api() >= agentbox_docker::engine::MIN_API);
    let c = running(&engine, "argv", Limits::default());
    let (status, out, err) = run(
        &engine,
        &c.name,
        &[
            "sh",
            "-c",
            r#"for a in "$@"; do printf '[%s]\n' "$a"; done; echo oops >&2; cat; exit 42"#,
            "sh",
            "two words",
            "--",
            "",
            "$HOME;`id`",
            "-m x",
        ],
        Some(b"from stdin\n"),
    );
    assert_eq!(status, 42, "{err}");
    assert_eq!(
        out,
        "[two words]\n[--]\n[]\n[$HOME;`id`]\n[-m x]\nfrom stdin\n"
    );
    assert_eq!(err, "oops\n");
    // No stdin: the command reads EOF at once rather than waiting.
    let (status, out, _) = run(&engine, &c.name, &["sh", "-c", "cat; echo done"], None);
    assert_eq!((status, out.as_str()), (0, "done\n"));
    // A command killed by a signal reports 128 + N.
    let (status, _, _) = run(&engine, &c.name, &["sh", "-c", "kill -9 $$"], None);
    assert_eq!(status, 137);
    // Output larger than a pipe's buffer arrives whole.
    let big = "x".repeat(300_000);
    let (status, out, _) = run(&engine, &c.name, &["cat"], Some(big.as_bytes()));
    assert_eq!((status, out.len()), (0, big.len()));
}

#[test]
fn a_box_container_is_hardened_and_limited() {
    let test = "a_box_container_is_hardened_and_limited";
    let Some(engine) = engine(test) else { return };
    let limits = Limits {
        memory_bytes: Some(256 << 20),
        pids: Some(64),
        nano_cpus: Some(500_000_000),
    };
    let c = running(&engine, "hardened", limits);
    let (_, status, _) = run(&engine, &c.name, &["cat", "/proc/self/status"], None);
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:\t")))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    // Exactly the box's capabilities, in the bounding set too.
    let names = [
        ("CHOWN", 0),
        ("DAC_OVERRIDE", 1),
        ("FOWNER", 3),
        ("FSETID", 4),
        ("KILL", 5),
        ("SETGID", 6),
        ("SETUID", 7),
        ("SETPCAP", 8),
        ("NET_BIND_SERVICE", 10),
        ("NET_RAW", 13),
        ("SYS_CHROOT", 18),
        ("AUDIT_WRITE", 29),
        ("SETFCAP", 31),
    ];
    assert_eq!(names.len(), BOX_CAPS.len());
    let want: u64 = names.iter().map(|(_, bit)| 1u64 << bit).sum();
    assert_eq!(field("CapBnd"), format!("{want:016x}"), "{status}");
    assert_eq!(field("CapEff"), format!("{want:016x}"), "{status}");
    assert_eq!(field("NoNewPrivs"), "1", "{status}");
    // 2: a seccomp filter is on (the engine's default profile).
    assert_eq!(field("Seccomp"), "2", "{status}");
    // No device node can be made (no MKNOD), and the limits are the container's.
    let (st, _, _) = run(
        &engine,
        &c.name,
        &["sh", "-c", "busybox mknod /tmp/sda b 8 0"],
        None,
    );
    assert_ne!(st, 0, "mknod worked");
    let info = engine.container(&c.name).expect("inspect").expect("there");
    assert!(info.running);
    assert_eq!(info.labels.get(LABEL).map(String::as_str), Some("hardened"));
    let (_, pids, _) = run(
        &engine,
        &c.name,
        &[
            "sh",
            "-c",
            "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max",
        ],
        None,
    );
    assert_eq!(pids.trim(), "64");
}

#[test]
fn a_commit_is_the_containers_files_and_a_new_container_starts_from_it() {
    let test = "a_commit_is_the_containers_files_and_a_new_container_starts_from_it";
    let Some(engine) = engine(test) else { return };
    let c = running(&engine, "commit", Limits::default());
    let (st, _, err) = run(
        &engine,
        &c.name,
        &[
            "sh",
            "-c",
            "echo made > /workspace/file && mkdir -p /workspace/d",
        ],
        None,
    );
    assert_eq!(st, 0, "{err}");
    let repo = "agentbox-test-commit";
    let tag = format!("t{}", std::process::id());
    let labels: HashMap<String, String> = [(LABEL.to_owned(), "commit".to_owned())].into();
    let id = engine
        .commit(&c.name, repo, &tag, "a node", &labels)
        .expect("commit");
    let image = engine
        .require_image(&format!("{repo}:{tag}"))
        .expect("committed image");
    assert_eq!(image.id, id);
    assert_eq!(image.labels.get(LABEL).map(String::as_str), Some("commit"));
    // A container from the commit sees the file, keeps the image's PATH and workdir.
    let name = format!("agentbox-test-from-commit-{}", std::process::id());
    let spec = ContainerSpec {
        name: name.clone(),
        image: format!("{repo}:{tag}"),
        cmd: vec!["sleep".into(), "3600".into()],
        ..Default::default()
    };
    engine.create_container(&spec).expect("create from commit");
    let second = Running {
        engine: &engine,
        name,
    };
    engine.start_container(&second.name).expect("start");
    let (st, out, _) = run(&engine, &second.name, &["sh", "-c", "pwd; cat file"], None);
    assert_eq!((st, out.as_str()), (0, "/workspace\nmade\n"));
    drop(second);
    drop(c);
    assert!(engine
        .remove_image(&format!("{repo}:{tag}"))
        .expect("rm image"));
    assert!(engine
        .image(&format!("{repo}:{tag}"))
        .expect("inspect")
        .is_none());
    assert!(!engine
        .remove_image(&format!("{repo}:{tag}"))
        .expect("rm again"));
}

#[test]
fn missing_images_containers_and_engines_are_named_with_a_hint() {
    let test = "missing_images_containers_and_engines_are_named_with_a_hint";
    let Some(engine) = engine(test) else { return };
    let spec = ContainerSpec {
        name: format!("agentbox-test-missing-{}", std::process::id()),
        image: "agentbox-no-such-image:1".into(),
        cmd: vec!["true".into()],
        ..Default::default()
    };
    let err = engine.create_container(&spec).expect_err("no image");
    assert!(matches!(err, DockerError::ImageMissing { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "image \"agentbox-no-such-image:1\" is not on the Docker engine at unix:///var/run/docker.sock"
    );
    assert!(err.hint().is_some());
    let err = engine
        .start_container("agentbox-no-such-box")
        .expect_err("no container");
    assert!(
        matches!(err, DockerError::ContainerMissing { .. }),
        "{err:?}"
    );
    assert!(!engine.remove_container("agentbox-no-such-box").expect("rm"));
    // An engine that is not there: named, with what to do, and at once.
    let dir = tempfile::tempdir().expect("tmp");
    let sock: PathBuf = dir.path().join("nothing.sock");
    let named = std::collections::BTreeMap::new();
    let env = |_: &str| None;
    let host = format!("unix://{}", sock.display());
    let ep = resolve(&Lookup {
        given: Some(&host),
        named: &named,
        env: &env,
        docker_config: None,
    })
    .expect("resolve");
    let err = Engine::connect(ep).expect_err("unreachable");
    assert!(matches!(err, DockerError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&host), "{err}");
    assert!(err.hint().is_some_and(|h| h.contains("dockerd")));
}

#[test]
fn an_image_builds_under_the_fingerprint_of_its_context() {
    let test = "an_image_builds_under_the_fingerprint_of_its_context";
    let Some(engine) = engine(test) else { return };
    let base = test_image(&engine);
    let dir = tempfile::tempdir().expect("tmp");
    let c = dir.path();
    fs_err::write(
        c.join("Dockerfile"),
        format!("FROM {base}\nCOPY a /a\nRUN echo built > /b\n"),
    )
    .expect("dockerfile");
    fs_err::write(c.join("a"), "from the context\n").expect("a");
    let ctx = agentbox_docker::image_build::pack(c, &c.join("Dockerfile")).expect("pack");
    let repo = "agentbox-test-built";
    let labels: HashMap<String, String> = [(LABEL.to_owned(), "built".to_owned())].into();
    let mut lines = Vec::new();
    let id = engine
        .build_image(&ctx, repo, &ctx.fingerprint, &labels, &mut |l| {
            lines.push(l.to_owned())
        })
        .expect("build");
    assert!(
        lines.iter().any(|l| l.contains("RUN echo built")),
        "{lines:?}"
    );
    let tagged = format!("{repo}:{}", ctx.fingerprint);
    assert_eq!(engine.require_image(&tagged).expect("built").id, id);
    let name = format!("agentbox-test-built-{}", std::process::id());
    let spec = ContainerSpec {
        name: name.clone(),
        image: tagged.clone(),
        cmd: vec!["sleep".into(), "3600".into()],
        ..Default::default()
    };
    let _ = engine.remove_container(&name);
    engine.create_container(&spec).expect("create");
    let c1 = Running {
        engine: &engine,
        name,
    };
    engine.start_container(&c1.name).expect("start");
    let (st, out, _) = run(&engine, &c1.name, &["cat", "/a", "/b"], None);
    assert_eq!((st, out.as_str()), (0, "from the context\nbuilt\n"));
    drop(c1);
    // A broken Dockerfile fails with the engine's message, naming the engine.
    fs_err::write(c.join("Dockerfile"), format!("FROM {base}\nRUN exit 3\n")).expect("df");
    let bad = agentbox_docker::image_build::pack(c, &c.join("Dockerfile")).expect("pack");
    assert_ne!(bad.fingerprint, ctx.fingerprint);
    let err = engine
        .build_image(&bad, repo, &bad.fingerprint, &labels, &mut |_| {})
        .expect_err("a failing RUN");
    assert!(err.to_string().contains("docker.sock"), "{err}");
    assert!(err.to_string().contains("exit"), "{err}");
    assert!(engine.remove_image(&tagged).expect("rm"));
}

#[test]
fn a_commands_terminal_has_the_size_given_and_follows_the_callers() {
    let test = "a_commands_terminal_has_the_size_given_and_follows_the_callers";
    let Some(engine) = engine(test) else { return };
    let c = running(&engine, "resize", Limits::default());
    let tty_run = |script: &str, size: Option<Arc<AtomicU32>>| {
        let spec = ExecSpec {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            tty: Some((24, 80)),
            tty_size: size,
            ..Default::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = engine
            .exec(&c.name, &spec, None, &mut out, &mut err)
            .expect("exec");
        (status, String::from_utf8_lossy(&out).trim().to_owned())
    };
    // The size comes with the command's start (at once after it, from engines older than
    // Docker 23): the script looks until it is there, for at most 5 s, then says what it
    // is. No input is attached: `stty` reads the terminal that is the command's output.
    let until = |size: &str| {
        format!(
            "i=0; while [ \"$(stty size <&2 2>/dev/null)\" != '{size}' ] && [ $i -lt 100 ]; \
             do sleep 0.05; i=$((i+1)); done; stty size <&1"
        )
    };
    assert_eq!(tty_run(&until("24 80"), None), (0, "24 80".to_owned()));
    // The caller's terminal is now 30x100: the command's follows, while it runs.
    let size = Arc::new(AtomicU32::new(pack_size(30, 100)));
    assert_eq!(
        tty_run(&until("30 100"), Some(size)),
        (0, "30 100".to_owned())
    );
}
