//! The in-box `agentbox` of a Docker box, through the binary, on a real engine, in an image
//! with no libc at all (the static busybox test image): the static agentbox is copied in,
//! and its requests reach the host over the relay's exec stream — `log`, `commit`, a
//! checkpoint request, the box checking itself out (which kills the asking command, as in
//! a local box, and the relay comes back on the new container) — while a node of another
//! box is as unknown from inside as one that never existed, and frames a box forges on the
//! stream are refused with the relay going on. `destroy` stops the relay.
//!
//! Needs the static build (`AGENTBOX_INBOX_BIN`, or the workspace's
//! `target/x86_64-unknown-linux-gnu/quickstart/agentbox`; `scripts/test` builds it).

use std::path::PathBuf;
use std::process::Output;

use agentbox_core::Home;
use agentbox_testkit::tier;

use crate::common::{code, log_ids, stderr, write, Env};
use crate::docker::{engine, test_image, Sweep};

const IN_BOX: &str = "/usr/local/bin/agentbox";

/// The static agentbox to copy into boxes, or `None` (skipped, failing under CI).
fn static_bin(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("AGENTBOX_INBOX_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/x86_64-unknown-linux-gnu/quickstart/agentbox")
        });
    if path.is_file() {
        Some(path)
    } else {
        tier::skip(
            test,
            &format!(
                "needs the static agentbox at {} (RUSTFLAGS='-C target-feature=+crt-static' cargo build --profile quickstart --target x86_64-unknown-linux-gnu -p agentbox)",
                path.display()
            ),
        );
        None
    }
}

struct Boxed<'a> {
    env: &'a Env,
    bin: String,
    /// More of the environment of every command (a remote engine's TLS).
    extra: Vec<(String, String)>,
}

impl Boxed<'_> {
    fn run(&self, args: &[&str]) -> Output {
        let mut envs = vec![("AGENTBOX_INBOX_BIN", self.bin.as_str())];
        envs.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        self.env.run_with(args, &envs)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "agentbox {args:?} failed ({:?}):\n{}",
            out.status,
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).expect("json")
    }

    /// Run `sh -c script` in box `name` (no auto-capture needed to tell anything).
    fn sh(&self, name: &str, script: &str) -> Output {
        self.run(&["exec", name, "--", "sh", "-c", script])
    }

    /// Wait until box `name`'s relay answers from inside (it starts beside the command
    /// that started the box, and comes back after a checkout).
    fn relay_up(&self, name: &str) {
        for _ in 0..240 {
            let out = self.sh(name, &format!("{IN_BOX} status >/dev/null 2>&1"));
            if code(&out) == Some(0) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let log = fs_err::read_to_string(self.relay_log(name)).unwrap_or_default();
        panic!("the relay of box {name} never answered; its log:\n{log}");
    }

    fn relay_log(&self, name: &str) -> PathBuf {
        agentbox_boxes::records::record::BoxDirs::new(&Home::at(self.env.path("home")), name)
            .dir
            .join("docker-relay.log")
    }
}

#[test]
fn the_in_box_agentbox_of_a_docker_box_relays_to_the_host() {
    let test = "the_in_box_agentbox_of_a_docker_box_relays_to_the_host";
    let Some(engine) = engine(test) else { return };
    let Some(bin) = static_bin(test) else { return };
    let image = test_image(&engine);
    let env = Env::new();
    let home = Home::at(env.path("home"));
    let _sweep = Sweep(&engine, home.clone());
    let b = Boxed {
        env: &env,
        bin: bin.display().to_string(),
        extra: Vec::new(),
    };
    // A plain directory: no git is needed in the image.
    let project = env.path("project");
    write(&project.join("a.txt"), "one\n");
    let name = format!("relay-{}", std::process::id());
    let other = format!("relay-other-{}", std::process::id());
    for n in [&name, &other] {
        let out = env
            .command(&["create", "--provider", "docker", "--image", &image, n])
            .env("AGENTBOX_INBOX_BIN", &bin)
            .current_dir(&project)
            .output()
            .expect("create");
        assert!(out.status.success(), "create {n}: {}", stderr(&out));
    }
    b.relay_up(&name);

    // The image has no libc: the in-box agentbox runs because it is static.
    let out = b.sh(
        &name,
        "for d in /lib /lib64 /usr/lib /usr/lib64; do [ -e $d ] && echo has $d; done; echo $AGENTBOX_BOX",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{name}\n"));

    // `log` from inside is the host's log of the box.
    let host_log = b.json(&["log", &name]);
    let out = b.sh(&name, &format!("{IN_BOX} --json log"));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let inside: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(log_ids(&inside), log_ids(&host_log));
    let first = match log_ids(&host_log).as_slice() {
        [only] => only.to_string(),
        other => panic!("a new box has one node: {other:?}"),
    };

    // `commit` from inside makes a node the host sees.
    let out = b.sh(
        &name,
        &format!("echo two > b.txt && {IN_BOX} commit -m 'made inside'"),
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let log = b.ok(&["log", &name]);
    assert!(log.contains("made inside"), "{log}");

    // A checkpoint asked for from inside is made on the host, for the box's project.
    let out = b.sh(
        &name,
        &format!("{IN_BOX} checkpoint create --name from-inside"),
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let ls = b.ok(&["checkpoint", "ls", "--all"]);
    assert!(ls.contains("from-inside"), "{ls}");

    // Another box's node is unknown from inside, as a node that never existed; naming the
    // other box is refused before anything is sent.
    let theirs = b.json(&["log", &other]);
    let their_head = log_ids(&theirs)[0].to_owned();
    let out = b.sh(&name, &format!("{IN_BOX} show {their_head}"));
    let never = b.sh(
        &name,
        &format!("{IN_BOX} show {}", "f".repeat(their_head.len())),
    );
    assert_ne!(code(&out), Some(0));
    assert_eq!(
        code(&out),
        code(&never),
        "{} / {}",
        stderr(&out),
        stderr(&never)
    );
    assert_eq!(
        stderr(&out).replace(&their_head, "ID"),
        stderr(&never).replace(&"f".repeat(their_head.len()), "ID")
    );
    let out = b.sh(&name, &format!("{IN_BOX} ps {other}"));
    assert_ne!(code(&out), Some(0));
    assert!(
        stderr(&out).contains("not reachable from inside"),
        "{}",
        stderr(&out)
    );

    // Frames forged on the relay's stream (written to the bridge's stdout from inside) are
    // refused, and the relay goes on.
    // (In a subshell: the write that follows the stream's end may get `SIGPIPE`.)
    let forge = r#"for p in /proc/[0-9]*; do
        if [ "$(tr '\000' ' ' < $p/cmdline 2>/dev/null)" = "/usr/local/bin/agentbox __relay-bridge " ]; then
            echo found
            ( printf '\000\000\000\010\000\000\001\000\001not json' > $p/fd/1
              sleep 1
              printf '\377\377\377\377\000\000\001\001\001' > $p/fd/1
              head -c 300000 /dev/zero > $p/fd/1 ) 2>/dev/null
            exit 0
        fi
    done"#;
    let out = b.sh(&name, forge);
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(
        found == "found\n",
        "no bridge found: {:?} {}",
        &found[..found.len().min(200)],
        stderr(&out)
    );
    let mut refused = String::new();
    for _ in 0..120 {
        refused = fs_err::read_to_string(b.relay_log(&name)).unwrap_or_default();
        if refused.contains("refused request 256") && refused.contains("refused request 257") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert!(
        refused.contains("refused request 256 of the box: malformed request"),
        "{refused}"
    );
    assert!(
        refused.contains("refused request 257 of the box: a request of 4294967295 bytes"),
        "{refused}"
    );
    // The stream was ended; the relay starts the bridge again.
    b.relay_up(&name);
    let out = b.sh(&name, &format!("{IN_BOX} --json log"));
    assert_eq!(code(&out), Some(0), "the relay goes on: {}", stderr(&out));

    // The box checks itself out: the asking command is killed with its container, as in
    // a local box, HEAD moves, and the relay comes back on the new container.
    let out = b.sh(&name, &format!("{IN_BOX} checkout {first}; sleep 30"));
    assert_eq!(code(&out), Some(137), "{}", stderr(&out));
    let out = b.run(&["exec", &name, "--", "cat", "b.txt"]);
    assert_ne!(code(&out), Some(0), "b.txt is gone with the checkout");
    b.relay_up(&name);
    let out = b.sh(&name, &format!("{IN_BOX} --json log"));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let inside: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(log_ids(&inside), log_ids(&b.json(&["log", &name])));
    let status = b.json(&["status", &name]);
    assert!(
        status.to_string().contains(&first),
        "HEAD is back at the first node: {status}"
    );

    // Stop stops the relay; start starts it again.
    b.ok(&["stop", &name]);
    assert!(!relay_runs(&name), "the relay outlived its box's stop");
    b.ok(&["start", &name]);
    b.relay_up(&name);

    // Destroy stops the relay.
    let lock = b.relay_log(&name).with_file_name("docker-relay.lock");
    let pid: i32 = fs_err::read_to_string(&lock)
        .expect("relay lock")
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("pid");
    for n in [&name, &other] {
        b.ok(&["destroy", n]);
    }
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
        && fs_err::read_to_string(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.contains("__docker-relay"));
    assert!(!alive, "the relay (pid {pid}) outlived its box");
}

/// Whether a relay process of box `name` runs on this host.
fn relay_runs(name: &str) -> bool {
    fs_err::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| fs_err::read(e.path().join("cmdline")).ok())
        .any(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.contains(&&b"__docker-relay"[..]) && args.contains(&name.as_bytes())
        })
}

/// On a remote engine (a second `dockerd` in a network namespace, over `tcp://` with
/// mutual TLS and over `ssh://`) the relay is the same exec stream: the in-box `log` and
/// `commit` reach the host, and `destroy` leaves no relay running.
#[test]
fn the_in_box_agentbox_works_on_a_remote_engine_over_tls_and_ssh() {
    let test = "the_in_box_agentbox_works_on_a_remote_engine_over_tls_and_ssh";
    let Some(bin) = static_bin(test) else { return };
    let Some(f) = agentbox_testkit::remote_docker::shared(test) else {
        return;
    };
    let seen = agentbox_docker::Engine::connect(agentbox_docker::endpoint::Endpoint {
        host: f.unix_host(),
        origin: agentbox_docker::endpoint::Origin::Given,
        tls: None,
    })
    .expect("connect to the fixture's socket");
    let image = test_image(&seen);
    for (via, tag) in [(f.tcp_host(), "tls"), (f.ssh_host(), "ssh")] {
        let env = Env::new();
        let home = Home::at(env.path("home"));
        let _sweep = Sweep(&seen, home.clone());
        let b = Boxed {
            env: &env,
            bin: bin.display().to_string(),
            extra: vec![
                ("DOCKER_TLS_VERIFY".into(), "1".into()),
                (
                    "DOCKER_CERT_PATH".into(),
                    f.client_certs().display().to_string(),
                ),
            ],
        };
        let project = env.path("project");
        write(&project.join("a.txt"), "far\n");
        let name = format!("relay-{tag}-{}", std::process::id());
        let out = env
            .command(&[
                "create",
                "--provider",
                "docker",
                "--image",
                &image,
                "--docker-host",
                &via,
                &name,
            ])
            .env("AGENTBOX_INBOX_BIN", &bin)
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", f.client_certs())
            .current_dir(&project)
            .output()
            .expect("create");
        assert!(out.status.success(), "create over {via}: {}", stderr(&out));
        assert!(
            seen.container(&agentbox_provider_docker::names::container(&name))
                .expect("inspect")
                .is_some(),
            "the box is on the remote engine"
        );
        b.relay_up(&name);
        let out = b.sh(
            &name,
            &format!("echo more >> a.txt && {IN_BOX} commit -m 'far inside'"),
        );
        assert_eq!(code(&out), Some(0), "{}", stderr(&out));
        let out = b.sh(&name, &format!("{IN_BOX} log"));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("far inside"),
            "{}",
            stderr(&out)
        );
        assert!(relay_runs(&name));
        b.ok(&["destroy", &name]);
        assert!(!relay_runs(&name), "the relay of {name} outlived it");
    }
}
