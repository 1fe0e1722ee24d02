//! A box's resources are bounded: memory, mounts, processes and the OOM killer stay in its
//! cgroup, and connections cannot exhaust its supervisor.

use std::path::{Path, PathBuf};

use super::*;

/// The directory of the box's `pids` cgroup on the host (v1 or v2), from a box process's
/// own `/proc/self/cgroup`.
fn box_cgroup_dir(s: &Sec, name: &str) -> PathBuf {
    let (_, out, _) = s.sh(name, "cat /proc/self/cgroup");
    let field = |l: &str| l.splitn(3, ':').map(str::to_owned).collect::<Vec<_>>();
    let lines: Vec<Vec<String>> = out.lines().map(field).collect();
    if let Some(v1) = lines
        .iter()
        .find(|f| f.len() == 3 && f[1].split(',').any(|c| c == "pids"))
    {
        return Path::new("/sys/fs/cgroup/pids").join(v1[2].trim_start_matches('/'));
    }
    let v2 = lines
        .iter()
        .find(|f| f.len() == 3 && f[0] == "0")
        .expect("a cgroup line");
    Path::new("/sys/fs/cgroup").join(v2[2].trim_start_matches('/'))
}

#[test]
fn memory_mounts_processes_and_the_oom_killer_are_bounded() {
    let Some(s) = boxed(
        "memory_mounts_processes_and_the_oom_killer_are_bounded",
        "res",
        &["--memory", "256M"],
    ) else {
        return;
    };
    // The in-memory mounts are sized from the memory limit, and full means full.
    let sizes = s.mount_sizes("res", "/tmp /run /dev/shm");
    let mib = 1u64 << 20;
    assert_eq!(
        sizes,
        [
            ("/tmp".to_owned(), 128 * mib),
            ("/run".to_owned(), 32 * mib),
            ("/dev/shm".to_owned(), 64 * mib)
        ]
    );
    let (status, _, err) = s.sh("res", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100");
    assert_ne!(status, 0);
    assert!(err.contains("No space left"), "{err}");
    let st = s.env.json(&["status", "res"]);
    let shm = st["box"]["scratch"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["path"] == "/dev/shm"))
        .expect("status lists /dev/shm");
    assert!(
        shm["used_bytes"].as_u64() >= Some(60 * mib),
        "status counts what /dev/shm holds: {shm}"
    );
    assert!(s
        .env
        .ok(&["status", "res"])
        .contains("/dev/shm 64.0 MiB of 64.0 MiB"));

    // Over the memory limit, the process that allocated dies; the box (its PID 1) stays.
    if python(&s, "res") {
        let (_, before, _) = s.sh("res", "cat /proc/1/stat | cut -d' ' -f22");
        let (status, _, _) = s.sh(
            "res",
            "rm -f /dev/shm/fill; exec python3 -c 'a = bytearray(600 << 20)'",
        );
        assert_eq!(status, 128 + 9, "the allocating process is killed");
        let (status, after, _) = s.sh("res", "cat /proc/1/stat | cut -d' ' -f22");
        assert_eq!(status, 0);
        assert_eq!(before, after, "the box's PID 1 survived");
    }
    let (_, adj, _) = s.sh("res", "cat /proc/self/oom_score_adj /proc/1/oom_score_adj");
    let adj: Vec<i32> = adj.lines().map(|l| l.parse().expect("a number")).collect();
    assert!(
        adj[0] > adj[1],
        "box processes are chosen before PID 1: {adj:?}"
    );

    // A process limit applies by default, and the owner can set another.
    let cg = box_cgroup_dir(&s, "res");
    assert_eq!(
        std::fs::read_to_string(cg.join("pids.max"))
            .expect("pids.max")
            .trim(),
        "4096"
    );
    assert!(st["box"]["limits"]
        .as_str()
        .is_some_and(|l| l.contains("4096 processes (default)")));
    let proj = s.env.path("proj");
    s.env.ok(&[
        "create",
        "many",
        "--from",
        proj.to_str().expect("utf-8"),
        "--pids",
        "9000",
    ]);
    let cg = box_cgroup_dir(&s, "many");
    assert_eq!(
        std::fs::read_to_string(cg.join("pids.max"))
            .expect("pids.max")
            .trim(),
        "9000"
    );
}

#[test]
fn a_box_cannot_exhaust_its_supervisor_with_connections() {
    let Some(s) = boxed(
        "a_box_cannot_exhaust_its_supervisor_with_connections",
        "conns",
        &[],
    ) else {
        return;
    };
    if !python(&s, "conns") {
        return;
    }
    // 100 idle connections to the in-box socket (more than it serves at once), held open while the host uses the box.
    let mut holder = s
        .env
        .command(&[
            "exec",
            "conns",
            "--",
            "python3",
            "-c",
            "import socket, sys, time\n\
             held = []\n\
             for i in range(100):\n\
             \x20   c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); c.connect('/run/agentbox/ctl/sock'); held.append(c)\n\
             print(len(held), flush=True)\n\
             time.sleep(20)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read");
    assert_eq!(line.trim(), "100");
    // The host side still answers, and an in-box agentbox command is refused clearly.
    s.env.ok(&["status", "conns"]);
    let (status, _, err) = s.sh("conns", "agentbox log");
    assert_ne!(status, 0);
    assert!(err.contains("too many connections"), "{err}");
    // Once they go (their command hung up with its caller), the box's commands work again.
    holder.kill().expect("kill");
    let _ = holder.wait();
    let (status, _, err) = s.sh("conns", "sleep 1; agentbox log");
    assert_eq!(status, 0, "{err}");
}
