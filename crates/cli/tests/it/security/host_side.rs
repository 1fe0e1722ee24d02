//! What the host does for a box, attacked from the box (the user's terminal is `terminal`):
//! a box's branch set to the user's unpushed commits (a sync and push with the host's
//! credentials), a box's bundle without a size bound, published ports offered to the host's
//! network, an imported manifest's text reaching the terminal, and `--env` values.

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{boxed, GitBox, Sec};
use crate::common::{code, git, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// The box finds a commit the user made on the host and never pushed (it reads the host's
/// object store through its alternates), makes it its branch's tip, or builds on it, and
/// asks for a sync and a push: both are refused, and the remote never gets the commit.
fn a_box_cannot_sync_or_push_host_commits(test: &str, rootless: bool) {
    let Some(g) = GitBox::new(test, rootless) else {
        return;
    };
    // A remote the host pushes to, with the host's credentials.
    let remote = g.s.env.path("remote.git");
    git(
        g.s.env.home.path(),
        &["init", "-q", "--bare", remote.to_str().expect("utf-8")],
    );
    let host_git_ok = |args: &[&str]| {
        let out = g.host_git(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    host_git_ok(&["remote", "add", "origin", remote.to_str().expect("utf-8")]);
    if rootless {
        crate::common::chown_nobody(&remote);
    }
    // The user's private work, on a branch of its own, never pushed.
    host_git_ok(&["checkout", "-q", "-b", "private"]);
    write(&g.repo.join("secret.txt"), "the user's unpushed secret\n");
    host_git_ok(&["add", "secret.txt"]);
    host_git_ok(&[
        "-c",
        "user.name=u",
        "-c",
        "user.email=u@x",
        "commit",
        "-qm",
        "host secret",
    ]);
    host_git_ok(&["checkout", "-q", "main"]);
    if rootless {
        crate::common::chown_nobody(&g.repo);
    }
    let secret = g.host_rev("private");
    let synced = g.host_rev("agentbox/g");
    // Found the way an agent would: every commit object the box can read.
    let find = "for c in $(git cat-file --batch-all-objects --batch-check='%(objectname) %(objecttype)' | awk '$2==\"commit\"{print $1}'); do git log -1 --format='%H %s' $c; done | grep 'host secret' | cut -d' ' -f1";
    let found = g.sh(find);
    assert_eq!(found.trim(), secret, "the box reads the host's objects");

    // 1. The branch set to the user's commit (the host has it: no bundle).
    g.sh(&format!("git reset -q --hard {secret}"));
    for cmd in [&["sync", "g"][..], &["push", "g"][..]] {
        let out = g.run(cmd);
        assert_eq!(
            code(&out),
            Some(4),
            "{cmd:?} took a host commit: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("did not make"), "{}", stderr(&out));
        assert!(stderr(&out).contains(&secret), "{}", stderr(&out));
    }
    assert_eq!(g.host_rev("agentbox/g"), synced);

    // 2. A commit of the box's own on top of it (a bundle carries it).
    g.sh("echo mine > mine.txt && git add mine.txt && git -c user.name=a -c user.email=a@b commit -qm mine");
    let out = g.run(&["push", "g"]);
    assert_eq!(
        code(&out),
        Some(4),
        "a push of the box's work on a host commit: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(&secret), "{}", stderr(&out));
    assert_eq!(g.host_rev("agentbox/g"), synced);
    let remote_has = Command::new("git")
        .args([
            "-C",
            remote.to_str().expect("utf-8"),
            "cat-file",
            "-e",
            &secret,
        ])
        .status()
        .expect("git");
    assert!(
        !remote_has.success(),
        "the user's unpushed commit reached the remote"
    );

    // 3. The box's own work on its base syncs and pushes.
    g.sh(&format!(
        "git reset -q --hard {synced} && echo ok > ok.txt && git add ok.txt && git -c user.name=a -c user.email=a@b commit -qm ok"
    ));
    g.ok(&["push", "g"]);
    let tip = g.sh("git rev-parse HEAD");
    assert_eq!(g.host_rev("agentbox/g"), tip.trim());
    // A rollback to the base, and back to its own earlier tip: both are the box's.
    g.sh(&format!("git reset -q --hard {synced}"));
    g.ok(&["sync", "g"]);
    g.sh(&format!("git reset -q --hard {}", tip.trim()));
    g.ok(&["sync", "g"]);
    assert_eq!(g.host_rev("agentbox/g"), tip.trim());
}

#[test]
fn a_box_cannot_sync_or_push_host_commits_root() {
    a_box_cannot_sync_or_push_host_commits("a_box_cannot_sync_or_push_host_commits_root", false);
}

#[test]
fn a_box_cannot_sync_or_push_host_commits_rootless() {
    a_box_cannot_sync_or_push_host_commits("a_box_cannot_sync_or_push_host_commits_rootless", true);
}

/// A box's branch bundle larger than the bound (here set low by the user who starts the
/// supervisor) is cut off while it arrives, and the host's branch stays.
#[test]
fn a_box_bundle_beyond_the_bound_is_refused() {
    let Some(g) = GitBox::new("a_box_bundle_beyond_the_bound_is_refused", false) else {
        return;
    };
    let synced = g.host_rev("agentbox/g");
    g.ok(&["stop", "g"]);
    // The supervisor started with the bound (the host user's environment).
    let out = g.s.env.run_with(
        &[
            "exec",
            "g",
            "--",
            "sh",
            "-c",
            "head -c 3000000 /dev/urandom > big.bin && git add big.bin && git -c user.name=a -c user.email=a@b commit -qm big",
        ],
        &[("AGENTBOX_BUNDLE_LIMIT", "1000000")],
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a bundle beyond the bound was taken");
    assert!(stderr(&out).contains("larger than"), "{}", stderr(&out));
    assert_eq!(g.host_rev("agentbox/g"), synced);
    // Nothing of it is left in the host's spool.
    let spooled: u64 = walk_sizes(&g.s.env.path("home"));
    assert!(spooled < 3_000_000, "{spooled} bytes left in the home");
}

/// The total size of the regular files under `dir` that are not the store's.
fn walk_sizes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() && e.file_name() != "store" => walk_sizes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// A port the host is not using.
fn free_port() -> u16 {
    std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, 0))
        .expect("a free port")
        .local_addr()
        .expect("address")
        .port()
}

/// The host's first IPv4 address that is not loopback.
fn external_ipv4() -> Option<std::net::Ipv4Addr> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .find(|ip: &std::net::Ipv4Addr| !ip.is_loopback())
}

/// The host addresses something listens on at TCP port `port` (`ss -ltnH`).
fn listening(port: u16) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .collect()
}

/// `--publish HOST:BOX` listens on the host's loopback only; `0.0.0.0:HOST:BOX` on every
/// address, as asked.
#[test]
fn published_ports_are_loopback_unless_an_address_is_given() {
    let Some(s) = boxed(
        "published_ports_are_loopback_unless_an_address_is_given",
        "plain",
        &[],
    ) else {
        return;
    };
    let Some(outside) = external_ipv4() else {
        agentbox_testkit::tier::skip("a non-loopback IPv4 address", "the host has none");
        return;
    };
    let (p, q) = (free_port(), free_port());
    let proj = s.env.path("proj");
    let proj = proj.to_str().expect("utf-8");
    s.env.ok(&[
        "create",
        "lo",
        "--from",
        proj,
        "--network",
        "private",
        "--publish",
        &format!("{p}:8123"),
    ]);
    s.env.ok(&[
        "create",
        "all",
        "--from",
        proj,
        "--network",
        "private",
        "--publish",
        &format!("0.0.0.0:{q}:8123"),
    ]);
    for name in ["lo", "all"] {
        s.env.ok(&["exec", name, "--", "true"]);
    }
    assert_eq!(
        listening(p),
        [format!("127.0.0.1:{p}")],
        "--publish {p}:8123"
    );
    assert_eq!(
        listening(q),
        [format!("0.0.0.0:{q}")],
        "--publish 0.0.0.0:{q}:8123"
    );
    let reach = |port: u16| {
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from((outside, port)),
            Duration::from_secs(5),
        )
        .is_ok()
    };
    assert!(
        !reach(p),
        "the loopback-published port answered on {outside}"
    );
    assert!(reach(q), "0.0.0.0:{q} did not answer on {outside}");
}

/// A checkpoint file's manifest whose version carries an OSC 52 clipboard write: `checkpoint
/// show` prints it escaped.
#[test]
fn an_imported_manifest_reaches_the_terminal_escaped() {
    if !require_root("an_imported_manifest_reaches_the_terminal_escaped") {
        return;
    }
    let s = Sec { env: Env::new() };
    let proj = s.env.path("proj");
    write(&proj.join("README"), "readme\n");
    git(&proj, &["init", "-q", "-b", "main"]);
    git(&proj, &["add", "-A"]);
    git(&proj, &["commit", "-qm", "first"]);
    s.env
        .ok(&["create", "w", "--from", proj.to_str().expect("utf-8")]);
    s.env.ok(&["checkpoint", "create", "w", "--name", "deps"]);
    let good = s.env.path("deps.ckpt");
    s.env.ok(&[
        "checkpoint",
        "export",
        "deps",
        "-o",
        good.to_str().expect("utf-8"),
    ]);
    let evil = s.env.path("evil.ckpt");
    {
        let mut read = tar::Archive::new(std::fs::File::open(&good).expect("open"));
        let mut out = tar::Builder::new(std::fs::File::create(&evil).expect("create"));
        for entry in read.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("read");
            if path == Path::new("agentbox-checkpoint.json") {
                let mut m: serde_json::Value = serde_json::from_slice(&data).expect("json");
                m["version"] = "1\u{1b}]52;c;cHduZWQ=\u{7}\rfake".into();
                m["name"] = "evil".into();
                data = serde_json::to_vec(&m).expect("json");
            }
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            out.append_data(&mut header, &path, data.as_slice())
                .expect("append");
        }
        out.finish().expect("finish");
    }
    let other = Sec { env: Env::new() };
    let clone = other.env.home.path().join("clone");
    git(
        other.env.home.path(),
        &["clone", "-q", proj.to_str().expect("utf-8"), "clone"],
    );
    let imported = other
        .env
        .command(&["checkpoint", "import", evil.to_str().expect("utf-8")])
        .current_dir(&clone)
        .output()
        .expect("run");
    if code(&imported) != Some(0) {
        // Refusing such a manifest outright is as good.
        assert_eq!(code(&imported), Some(8), "{}", stderr(&imported));
        return;
    }
    for args in [
        &["checkpoint", "show", "evil"][..],
        &["checkpoint", "ls"][..],
    ] {
        let out = other
            .env
            .command(args)
            .current_dir(&clone)
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r'),
            "{args:?}: {text:?}"
        );
    }
    let show = other
        .env
        .command(&["checkpoint", "show", "evil"])
        .current_dir(&clone)
        .output()
        .expect("run");
    assert!(
        String::from_utf8_lossy(&show.stdout).contains("\\u{1b}]52"),
        "{}",
        String::from_utf8_lossy(&show.stdout)
    );
}

/// `--env NAME` passes this shell's value, as `docker run -e NAME` does; a NAME the shell
/// does not set is refused, not dropped.
#[test]
fn env_without_a_value_takes_the_shell_s_or_is_refused() {
    let Some(s) = boxed(
        "env_without_a_value_takes_the_shell_s_or_is_refused",
        "envs",
        &[],
    ) else {
        return;
    };
    let out = s.env.run_with(
        &[
            "exec",
            "envs",
            "--env",
            "FROM_SHELL",
            "--env",
            "GIVEN=x=y",
            "--",
            "sh",
            "-c",
            "echo \"$FROM_SHELL $GIVEN\"",
        ],
        &[("FROM_SHELL", "shell value")],
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "shell value x=y\n");
    let out = s.env.run(&[
        "exec",
        "envs",
        "--env",
        "AGENTBOX_SURELY_UNSET",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--env AGENTBOX_SURELY_UNSET=VALUE"),
        "{}",
        stderr(&out)
    );
}
