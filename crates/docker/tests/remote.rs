//! The engine client against a remote engine, for real (tier 2): a second `dockerd` in a
//! network namespace of the test's own (see `agentbox_testkit::remote_docker`), reached over
//! `tcp://` with mutual TLS and over `ssh://`. Every box operation the crate offers runs
//! there: the test image imported over the connection, a hardened container, commands with
//! their exact argv, stdin and status, a commit, removal.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use agentbox_docker::container::{ContainerSpec, Limits};
use agentbox_docker::endpoint::{resolve, Endpoint, Lookup, Origin, TlsFiles};
use agentbox_docker::engine::MIN_API;
use agentbox_docker::{DockerError, Engine};
use agentbox_testkit::remote_docker::{self, RemoteDocker};
use common::{run, running, test_image, Running, LABEL};

fn fixture(test: &str) -> Option<Arc<RemoteDocker>> {
    remote_docker::shared(test)
}

/// The fixture's engine over mutual TLS, as a `--docker-host` URL with its files.
fn tls_endpoint(f: &RemoteDocker, certs: &std::path::Path) -> Endpoint {
    Endpoint {
        host: f.tcp_host(),
        origin: Origin::Given,
        tls: Some(TlsFiles {
            ca: certs.join("ca.pem"),
            cert: certs.join("cert.pem"),
            key: certs.join("key.pem"),
        }),
    }
}

/// The same engine through its socket: what the tests check behind the remote connection.
fn local_view(f: &RemoteDocker) -> Engine {
    Engine::connect(Endpoint {
        host: f.unix_host(),
        origin: Origin::Given,
        tls: None,
    })
    .expect("connect to the fixture's socket")
}

/// A box's life on `engine`: the test image imported over the connection, a hardened
/// container, commands, a commit and a container from it, removal of all of it.
fn a_box_lives_on(engine: &Engine, f: &RemoteDocker, via: &str) {
    assert!(engine.api() >= MIN_API, "{:?}", engine.api());
    let image = test_image(engine);
    let limits = Limits {
        pids: Some(64),
        ..Default::default()
    };
    let c = running(engine, &format!("remote-{via}"), limits);
    // It is on the fixture's engine (and so not on another one).
    let seen = local_view(f);
    assert!(
        seen.container(&c.name).expect("inspect").is_some(),
        "{}",
        f.log()
    );

    // Hardened as a local engine's container is.
    let (_, status, _) = run(engine, &c.name, &["cat", "/proc/self/status"], None);
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:\t")))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    // CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE NET_RAW
    // SYS_CHROOT AUDIT_WRITE SETFCAP.
    let want: u64 = [0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31]
        .iter()
        .map(|bit| 1u64 << bit)
        .sum();
    assert_eq!(field("CapBnd"), format!("{want:016x}"), "{status}");
    assert_eq!(field("CapEff"), format!("{want:016x}"), "{status}");
    assert_eq!(field("NoNewPrivs"), "1", "{status}");
    assert_eq!(field("Seccomp"), "2", "{status}");

    // Exact argv, stdin in, stdout and stderr apart, the status out.
    let (st, out, err) = run(
        engine,
        &c.name,
        &[
            "sh",
            "-c",
            r#"for a in "$@"; do printf '[%s]\n' "$a"; done; echo oops >&2; cat; exit 42"#,
            "sh",
            "two words",
            "",
            "$HOME;`id`",
        ],
        Some(b"from stdin\n"),
    );
    assert_eq!(st, 42, "{err}");
    assert_eq!(out, "[two words]\n[]\n[$HOME;`id`]\nfrom stdin\n");
    assert_eq!(err, "oops\n");
    // Megabytes both ways over the connection arrive whole.
    let big: String = (0..200_000).map(|i| format!("{i:07}\n")).collect();
    let (st, out, _) = run(engine, &c.name, &["cat"], Some(big.as_bytes()));
    assert_eq!(st, 0);
    assert!(out == big, "{} bytes back of {}", out.len(), big.len());
    let (st, _, _) = run(engine, &c.name, &["sh", "-c", "kill -9 $$"], None);
    assert_eq!(st, 137);

    // A commit, and a container from it.
    let (st, _, err) = run(
        engine,
        &c.name,
        &["sh", "-c", "echo made > /workspace/file"],
        None,
    );
    assert_eq!(st, 0, "{err}");
    let repo = format!("agentbox-test-remote-{via}");
    let tag = format!("t{}", std::process::id());
    let labels: HashMap<String, String> = [(LABEL.to_owned(), via.to_owned())].into();
    let node = format!("{repo}:{tag}");
    let id = engine
        .commit(&c.name, &repo, &tag, "a node", &labels)
        .expect("commit");
    assert_eq!(engine.require_image(&node).expect("committed").id, id);
    let name = format!(
        "agentbox-test-remote-{via}-from-commit-{}",
        std::process::id()
    );
    let _ = engine.remove_container(&name);
    let spec = ContainerSpec {
        name: name.clone(),
        image: node.clone(),
        cmd: vec!["sleep".into(), "3600".into()],
        ..Default::default()
    };
    engine
        .create_container(&spec)
        .expect("create from the commit");
    let second = Running { engine, name };
    engine.start_container(&second.name).expect("start");
    let (st, out, _) = run(engine, &second.name, &["sh", "-c", "pwd; cat file"], None);
    assert_eq!((st, out.as_str()), (0, "/workspace\nmade\n"));

    // Removal: nothing of the box is left on the engine but the shared test image.
    let names = [c.name.clone(), second.name.clone()];
    drop(second);
    drop(c);
    for n in &names {
        assert!(engine.container(n).expect("inspect").is_none(), "{n}");
    }
    assert!(engine.remove_image(&node).expect("rm image"));
    assert!(engine.image(&node).expect("inspect").is_none());
    assert!(engine.image(&image).expect("inspect").is_some());
}

#[test]
fn a_tls_engine_answers_its_client_and_refuses_any_other() {
    let test = "a_tls_engine_answers_its_client_and_refuses_any_other";
    let Some(f) = fixture(test) else { return };
    let engine = Engine::connect(tls_endpoint(&f, &f.client_certs()))
        .unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    assert!(engine.api() >= MIN_API, "{:?}", engine.api());
    assert!(!engine.version().is_empty());
    // A client certificate of another CA, and no client certificate at all: refused, the
    // engine named, with what to do.
    let nowhere = f.dir().join("no-such-certs");
    for certs in [f.untrusted_certs(), nowhere] {
        let mut ep = tls_endpoint(&f, &certs);
        if !certs.exists() {
            // The engine's CA is known, the client has nothing to show.
            ep.tls = Some(TlsFiles {
                ca: f.client_certs().join("ca.pem"),
                cert: certs.join("cert.pem"),
                key: certs.join("key.pem"),
            });
        }
        let err = Engine::connect(ep).expect_err("a client the engine does not trust");
        assert!(
            matches!(err, DockerError::Unreachable { .. }),
            "{}: {err:?}",
            certs.display()
        );
        assert!(err.to_string().contains(&f.tcp_host()), "{err}");
        assert!(err.hint().is_some());
    }
    // Plain HTTP to the TLS port is no engine either.
    let plain = Endpoint {
        host: f.tcp_host(),
        origin: Origin::Given,
        tls: None,
    };
    let err = Engine::connect(plain).expect_err("http to a TLS port");
    assert!(err.to_string().contains(&f.tcp_host()), "{err}");
}

#[test]
fn a_tls_engine_keeps_its_connections_for_the_next_request() {
    let test = "a_tls_engine_keeps_its_connections_for_the_next_request";
    let Some(f) = fixture(test) else { return };
    let mut ep = tls_endpoint(&f, &f.client_certs());
    ep.host = f.counted_tcp_host();
    let engine = Engine::connect(ep).unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    let c = running(&engine, "remote-pool", Limits::default());
    let execs = 4;
    for i in 0..execs {
        let (st, out, _) = run(&engine, &c.name, &["echo", &i.to_string()], None);
        assert_eq!((st, out), (0, format!("{i}\n")));
    }
    // Some ten requests so far. An exec keeps the connection it starts on (the engine
    // takes it over for the command's streams), so each one opens one more; anything else
    // rides on a kept connection.
    let opened = f.counted_tls_connections();
    assert!(
        opened <= 1 + execs,
        "{opened} connections for {execs} execs"
    );
}

#[test]
fn a_box_lives_on_an_engine_over_tls() {
    let test = "a_box_lives_on_an_engine_over_tls";
    let Some(f) = fixture(test) else { return };
    let engine = Engine::connect(tls_endpoint(&f, &f.client_certs()))
        .unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    a_box_lives_on(&engine, &f, "tls");
}

#[test]
fn a_box_lives_on_a_named_engine_over_ssh() {
    let test = "a_box_lives_on_a_named_engine_over_ssh";
    let Some(f) = fixture(test) else { return };
    let named: BTreeMap<String, String> = [("big".to_owned(), f.ssh_host())].into();
    let env = |_: &str| None;
    let ep = resolve(&Lookup {
        given: Some("big"),
        named: &named,
        env: &env,
        docker_config: None,
    })
    .expect("resolve the named host");
    assert_eq!(ep.origin, Origin::Named("big".into()));
    assert!(ep.is_remote() && ep.tls.is_none());
    assert_eq!(ep.shown(), format!("big ({})", f.ssh_host()));
    let engine = Engine::connect(ep).unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    a_box_lives_on(&engine, &f, "ssh");
}

#[test]
fn an_ssh_engine_logs_in_once_for_all_its_connections() {
    let test = "an_ssh_engine_logs_in_once_for_all_its_connections";
    let Some(f) = fixture(test) else { return };
    let engine = Engine::connect(Endpoint {
        host: f.counted_ssh_host(),
        origin: Origin::Given,
        tls: None,
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    let c = running(&engine, "remote-once", Limits::default());
    // Every exec is a connection of its own (the engine takes it over for the command's
    // streams); they all ride on the one ssh connection.
    for i in 0..4 {
        let (st, out, _) = run(&engine, &c.name, &["echo", &i.to_string()], None);
        assert_eq!((st, out), (0, format!("{i}\n")));
    }
    assert_eq!(f.counted_logins(), 1);
    drop(c);
    drop(engine);
    // A new engine value logs in again: the connection was closed with the old one.
    let engine = Engine::connect(Endpoint {
        host: f.counted_ssh_host(),
        origin: Origin::Given,
        tls: None,
    })
    .expect("connect again");
    assert!(engine.api() >= MIN_API);
    assert_eq!(f.counted_logins(), 2);
}

#[test]
fn an_ssh_engine_that_cannot_be_used_is_unreachable_with_the_reason() {
    let test = "an_ssh_engine_that_cannot_be_used_is_unreachable_with_the_reason";
    let Some(f) = fixture(test) else { return };
    // `daemon` has no key there: ssh refuses the login, and says so.
    // `nobody` may log in, but cannot run `docker system dial-stdio`: no engine answers.
    for (user, why) in [("daemon", Some("Permission denied")), ("nobody", None)] {
        let host = format!("ssh://{user}@{}", f.ip());
        let err = Engine::connect(Endpoint {
            host: host.clone(),
            origin: Origin::Given,
            tls: None,
        })
        .expect_err("no engine for this user");
        assert!(matches!(err, DockerError::Unreachable { .. }), "{err:?}");
        assert!(err.to_string().contains(&host), "{err}");
        if let Some(why) = why {
            assert!(err.to_string().contains(why), "{err}");
        }
        let hint = err.hint().expect("a hint");
        assert!(hint.contains("docker system dial-stdio"), "{hint}");
    }
}

#[test]
fn an_upload_slower_than_the_request_timeout_completes() {
    let test = "an_upload_slower_than_the_request_timeout_completes";
    let Some(f) = fixture(test) else { return };
    let mut engine = Engine::connect(tls_endpoint(&f, &f.client_certs()))
        .unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    let base = test_image(&engine);
    // 30 MB that do not compress, over a 24 Mbit/s link: some 10 s of upload, twice the
    // request timeout. The engine answers an import or a build only once it has the whole
    // body. (Much more than the sockets buffer, whose draining after the body's end the
    // upload's watch cannot see.)
    let blob = agentbox_testkit::tree_gen::random_bytes(7, 30 << 20);
    let dir = tempfile::tempdir().expect("tmp");
    let tar_path = dir.path().join("rootfs.tar");
    let mut b = tar::Builder::new(fs_err::File::create(&tar_path).expect("tar"));
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(blob.len() as u64);
    b.append_data(&mut h, "blob", blob.as_slice())
        .expect("blob");
    b.into_inner().expect("finish");
    let ctx_dir = dir.path().join("ctx");
    fs_err::create_dir(&ctx_dir).expect("ctx");
    fs_err::write(
        ctx_dir.join("Dockerfile"),
        format!("FROM {base}\nCOPY blob /blob\n"),
    )
    .expect("Dockerfile");
    fs_err::write(ctx_dir.join("blob"), &blob).expect("blob");
    let ctx =
        agentbox_docker::image_build::pack(&ctx_dir, &ctx_dir.join("Dockerfile")).expect("pack");

    let slow = f.limit_upload("24mbit");
    engine.set_request_timeout(std::time::Duration::from_secs(5));
    let repo = "agentbox-test-remote-slow";
    let tag = format!("t{}", std::process::id());
    let imported = engine
        .import_rootfs(&tar_path, repo, &tag, &[])
        .expect("import over a slow link");
    let labels: HashMap<String, String> = [(LABEL.to_owned(), "slow".to_owned())].into();
    let built_repo = "agentbox-test-remote-slow-built";
    let built = engine
        .build_image(&ctx, built_repo, &ctx.fingerprint, &labels, &mut |_| {})
        .expect("build over a slow link");
    drop(slow);
    assert_eq!(
        engine
            .require_image(&format!("{repo}:{tag}"))
            .expect("imported")
            .id,
        imported
    );
    let built_name = format!("{built_repo}:{}", ctx.fingerprint);
    assert_eq!(engine.require_image(&built_name).expect("built").id, built);
    assert!(engine.remove_image(&built_name).expect("rm"));
    assert!(engine.remove_image(&format!("{repo}:{tag}")).expect("rm"));
}

#[test]
fn docker_host_with_tls_verify_and_a_cert_path_reaches_the_engine() {
    let test = "docker_host_with_tls_verify_and_a_cert_path_reaches_the_engine";
    let Some(f) = fixture(test) else { return };
    let named = BTreeMap::new();
    let certs = f.client_certs().display().to_string();
    let host = f.tcp_host();
    let env = |k: &str| match k {
        "DOCKER_HOST" => Some(host.clone()),
        "DOCKER_TLS_VERIFY" => Some("1".to_owned()),
        "DOCKER_CERT_PATH" => Some(certs.clone()),
        _ => None,
    };
    let ep = resolve(&Lookup {
        given: None,
        named: &named,
        env: &env,
        docker_config: None,
    })
    .expect("resolve DOCKER_HOST");
    assert_eq!(
        (ep.host.as_str(), &ep.origin),
        (host.as_str(), &Origin::Env)
    );
    let engine = Engine::connect(ep).unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    assert!(engine.api() >= MIN_API);
    let c = running(&engine, "remote-env", Limits::default());
    let (st, out, _) = run(&engine, &c.name, &["echo", "there"], None);
    assert_eq!((st, out.as_str()), (0, "there\n"));
    // Without DOCKER_TLS_VERIFY the same address is plain HTTP, which the engine refuses.
    let env = |k: &str| (k == "DOCKER_HOST").then(|| host.clone());
    let ep = resolve(&Lookup {
        given: None,
        named: &named,
        env: &env,
        docker_config: None,
    })
    .expect("resolve");
    assert!(ep.tls.is_none());
    let err = Engine::connect(ep).expect_err("plain http");
    assert!(matches!(err, DockerError::Unreachable { .. }), "{err:?}");
}

/// Time to connect and run a first command (`true`) in a running container, over the
/// engine's socket, over tcp+TLS and over ssh: the median of 5 each, printed.
#[test]
#[ignore = "a measurement: cargo nextest run -p agentbox-docker --test remote --run-ignored only --no-capture"]
fn bench_connect_and_first_exec() {
    let test = "bench_connect_and_first_exec";
    let Some(f) = fixture(test) else { return };
    let unix = Endpoint {
        host: f.unix_host(),
        origin: Origin::Given,
        tls: None,
    };
    let tls = tls_endpoint(&f, &f.client_certs());
    let ssh = Endpoint {
        host: f.ssh_host(),
        origin: Origin::Given,
        tls: None,
    };
    let setup = Engine::connect(unix.clone()).expect("connect");
    let c = running(&setup, "remote-bench", Limits::default());
    // What ssh itself costs: a login running `true`, the fixture's `ssh` being on PATH.
    let mut login = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let st = std::process::Command::new("ssh")
            .arg(format!("root@{}", f.ip()))
            .arg("true")
            .status()
            .expect("ssh");
        assert!(st.success());
        login.push(start.elapsed());
    }
    login.sort();
    println!(
        "ssh login running `true`: {:.1} ms (median of 5)",
        login[2].as_secs_f64() * 1e3
    );
    for (name, ep) in [("unix", unix), ("tcp+tls", tls), ("ssh", ssh)] {
        let mut connect = Vec::new();
        let mut total = Vec::new();
        let mut next = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            let engine = Engine::connect(ep.clone()).expect("connect");
            let connected = start.elapsed();
            let (st, _, _) = run(&engine, &c.name, &["true"], None);
            assert_eq!(st, 0);
            total.push(start.elapsed());
            connect.push(connected);
            // A further exec on the same connection: what each command costs after.
            let start = Instant::now();
            let (st, _, _) = run(&engine, &c.name, &["true"], None);
            assert_eq!(st, 0);
            next.push(start.elapsed());
        }
        let median = |v: &mut Vec<std::time::Duration>| {
            v.sort();
            v[2].as_secs_f64() * 1e3
        };
        println!(
            "{name:8} connect {:>7.1} ms   connect + first exec {:>7.1} ms   next exec {:>7.1} ms   (medians of 5)",
            median(&mut connect),
            median(&mut total),
            median(&mut next),
        );
    }
}
