//! A box's life: checkouts (killing or keeping its processes), a killed supervisor, a
//! btrfs store, a flattened chain, many boxes created and destroyed at once.

use std::process::Stdio;

use crate::common::{code, git, stderr, write};
use agentbox_testkit::basefix::BaseFixture;
use agentbox_testkit::tier::require_root;

use super::*;

#[test]
fn checkout_kills_every_process_of_the_box() {
    let Some((b, proj)) = boxes("checkout_kills_every_process_of_the_box") else {
        return;
    };
    b.create("k", &proj, &[]);
    let marker = format!("{}", 900_000 + std::process::id() % 99_999);
    b.env
        .ok(&["spawn", "k", "--", "sleep", &format!("{marker}1")]);
    b.env.ok(&[
        "spawn",
        "k",
        "--",
        "sh",
        "-c",
        &format!("sleep {marker}2; true"),
    ]);
    let mut fg = b
        .command(&["exec", "k", "--", "sleep", &format!("{marker}3")])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn exec");
    wait_until("the foreground command", || {
        !host_processes_with(&format!("{marker}3")).is_empty()
    });
    let ps = b.env.json(&["ps", "k"]);
    assert_eq!(running(&ps).len(), 3, "{ps}");

    let out = b.env.run(&["checkout", "k", "HEAD"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("killed 3 processes"),
        "{}",
        stderr(&out)
    );
    let status = fg.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(137),
        "the foreground exec was killed too"
    );
    assert!(host_processes_with(&marker).is_empty());
    assert_eq!(running(&b.env.json(&["ps", "k"])).len(), 0);
    // The box is running again.
    assert_eq!(b.sh_ok("k", "echo alive"), "alive\n");
}

#[test]
fn a_killed_supervisor_leaks_nothing_and_the_box_restarts() {
    let Some((b, proj)) = boxes("a_killed_supervisor_leaks_nothing_and_the_box_restarts") else {
        return;
    };
    b.create("crash", &proj, &[]);
    b.sh_ok("crash", "echo kept > /workspace/kept");
    let marker = format!("{}", 800_000 + std::process::id() % 99_999);
    b.env.ok(&["spawn", "crash", "--", "sleep", &marker]);
    wait_until("the spawned process", || {
        !host_processes_with(&marker).is_empty()
    });
    let pid = b.supervisor_pid("crash").expect("supervisor pid");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill supervisor");
    wait_until("the box's processes to die", || {
        host_processes_with(&marker).is_empty()
    });
    // The supervisor's other threads (and its socket) may outlive its main thread briefly.
    // A zombie leader whose other threads still exit keeps its socket open.
    wait_until("the supervisor to be gone", || {
        std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |d| d.count() == 0)
    });
    let upper = b.env.path("home/store/envs/crash/work/upper");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(upper.to_str().expect("utf-8")),
        "a box mount leaked"
    );
    let out = b.env.run(&["start", "crash"]);
    assert_eq!(
        code(&out),
        Some(0),
        "{}\nsupervisor log:\n{}",
        stderr(&out),
        std::fs::read_to_string(b.env.path("home/boxes/crash/supervisor.log")).unwrap_or_default()
    );
    assert_eq!(b.sh_ok("crash", "cat /workspace/kept"), "kept\n");
    assert_eq!(b.node_count("crash"), 2);
}

#[test]
fn checkout_can_keep_the_processes_running() {
    let Some((b, proj)) = boxes("checkout_can_keep_the_processes_running") else {
        return;
    };
    b.create("self", &proj, &[]);
    b.sh_ok("self", "echo v1 > f");
    // Mistakes, including a symlink where the target has a directory: restoring must
    // replace it, never write through it.
    b.sh_ok(
        "self",
        "echo v2 > f; mkdir gone; echo g > gone/x; rm -rf src; ln -s /etc src",
    );
    let marker = format!("{}", 600_000 + std::process::id() % 99_999);
    b.env.ok(&["spawn", "self", "--", "sleep", &marker]);
    let out = b
        .env
        .run(&["checkout", "self", "HEAD~1", "--keep-processes"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        !host_processes_with(&marker).is_empty(),
        "the process was kept"
    );
    let out = b.sh_ok(
        "self",
        "cat f; test -e gone && echo gone-present; test -L src && echo src-link; cat src/main.js; test -e /etc/main.js && echo leaked; true",
    );
    assert_eq!(out, "v1\nconsole.log('hi')\n");
    let msgs = messages(&b, "self");
    assert!(
        msgs.last().is_some_and(|m| m.starts_with("restored ")),
        "{msgs:?}"
    );
    let diff = b.env.ok(&["diff", "self", "HEAD~2", "HEAD"]);
    assert!(diff.starts_with("0 added, 0 removed, 0 modified"), "{diff}");
}

#[test]
fn boxes_run_on_a_btrfs_store() {
    if !require_root("boxes_run_on_a_btrfs_store") {
        return;
    }
    let Some(fs) = agentbox_testkit::loopfs::LoopFs::btrfs(768 << 20) else {
        return;
    };
    let b = Boxes::new();
    std::os::unix::fs::symlink(fs.path(), b.env.path("home")).expect("symlink home");
    let proj = project(b.env.home.path());
    b.create("onbtrfs", &proj, &[]);
    assert_eq!(b.env.json(&["status", "onbtrfs"])["backend"], "btrfs");
    b.sh_ok("onbtrfs", "echo v2 > /workspace/README");
    // Deleting a file of the base (the host's /) and replacing a base directory: the
    // layer keeps the overlay markers, across commits and restarts. The base files are the
    // test's own, so the result does not depend on what this machine's / holds.
    let base = BaseFixture::new();
    let f = base.display();
    b.sh_ok(
        "onbtrfs",
        &format!("rm {f}/file; rm -rf {f}/tree; mkdir {f}/tree; echo mine > {f}/tree/only"),
    );
    b.sh_ok("onbtrfs", "echo v3 > /workspace/README");
    assert_eq!(
        b.node_count("onbtrfs"),
        4,
        "{}",
        std::fs::read_to_string(b.env.path("home/boxes/onbtrfs/supervisor.log"))
            .unwrap_or_default()
    );
    b.env.ok(&["stop", "onbtrfs"]);
    let out = b.sh_ok(
        "onbtrfs",
        &format!("cat README; test -e {f}/file && echo base-file || echo gone; ls -A {f}/tree"),
    );
    assert_eq!(out, "v3\ngone\nonly\n");
    // Looking at the tree after a restart changed nothing: no node (overlayfs marks the
    // merged directories it looks into, which is not a change of the box).
    assert_eq!(b.node_count("onbtrfs"), 4, "{:?}", messages(&b, "onbtrfs"));
    b.env.ok(&["undo", "onbtrfs"]);
    b.env.ok(&["undo", "onbtrfs"]);
    let out = b.sh_ok(
        "onbtrfs",
        &format!(
            "cat README; test -e {f}/file && echo base-file || echo gone; ls {f}/tree | wc -l"
        ),
    );
    assert_eq!(out, format!("v2\nbase-file\n{}\n", BaseFixture::DIRS));
    let diff = b.env.ok(&["diff", "onbtrfs", "HEAD~1", "HEAD"]);
    assert!(diff.contains("workspace/README"), "{diff}");
    // Background writes are captured on btrfs too.
    b.env.ok(&[
        "spawn",
        "onbtrfs",
        "--",
        "sh",
        "-c",
        "echo bg > /workspace/bg; sleep 1000",
    ]);
    wait_until("a node for the background write", || {
        b.env
            .ok(&["show", "onbtrfs", "HEAD"])
            .contains("workspace/bg")
    });
    let msgs = messages(&b, "onbtrfs");
    assert!(
        msgs.last().is_some_and(|m| m.starts_with("auto: while")),
        "{msgs:?}"
    );
    b.env.ok(&["destroy", "onbtrfs"]);
}

#[test]
fn a_flattened_box_chain_keeps_its_deletions() {
    let Some((b, proj)) = boxes("a_flattened_box_chain_keeps_its_deletions") else {
        return;
    };
    b.create("deep", &proj, &[]);
    // A deletion of a base file and a replaced base directory, then enough commits for the
    // layer chain to be flattened (it is capped at 24 layers).
    let base = BaseFixture::new();
    let f = base.display();
    b.sh_ok(
        "deep",
        &format!("rm {f}/file; rm -rf {f}/tree; mkdir {f}/tree; echo mine > {f}/tree/only"),
    );
    for i in 0..26 {
        b.sh_ok("deep", &format!("echo {i} > /workspace/n{}", i % 3));
    }
    let depth = b.env.json(&["status", "deep"])["env"]["chain_depth"]
        .as_u64()
        .expect("chain depth");
    assert!(depth < 24, "the chain was flattened (depth {depth})");
    b.env.ok(&["stop", "deep"]);
    let out = b.sh_ok(
        "deep",
        &format!("test -e {f}/file && echo base-file || echo gone; ls -A {f}/tree; cat n0 n1 n2"),
    );
    assert_eq!(out, "gone\nonly\n24\n25\n23\n");
}

#[test]
fn twenty_boxes_created_and_destroyed_in_parallel_lose_nothing() {
    let Some((b, _)) = boxes("twenty_boxes_created_and_destroyed_in_parallel_lose_nothing") else {
        return;
    };
    let repo = b.env.path("repo");
    for i in 0..50 {
        write(&repo.join(format!("src/f{i}.txt")), "x\n");
    }
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    write(&repo.join("untracked.txt"), "u\n");
    let repo_s = repo.to_str().expect("utf-8").to_owned();
    let run_all = |args: Vec<Vec<String>>| {
        let children: Vec<_> = args
            .into_iter()
            .map(|a| {
                b.command(&a.iter().map(String::as_str).collect::<Vec<_>>())
                    .output()
            })
            .collect();
        for c in children {
            let out = c.expect("run");
            assert_eq!(code(&out), Some(0), "{}", stderr(&out));
        }
    };
    // Started together, not one after the other.
    let creates: Vec<Vec<String>> = (0..20)
        .map(|i| {
            vec![
                "create".into(),
                format!("par-{i}"),
                "--from".into(),
                repo_s.clone(),
            ]
        })
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = creates
            .into_iter()
            .map(|a| s.spawn(|| run_all(vec![a])))
            .collect();
        for h in handles {
            h.join().expect("create thread");
        }
    });
    let list = b.env.json(&["list"]);
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names.len(), 20, "{names:?}");
    // Every box got its own number in the project: 1 to 20, none twice.
    let mut numbers: Vec<u64> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["box"]["index"].as_u64())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=20).collect::<Vec<u64>>());
    let refs = git(
        &repo,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/agentbox/",
        ],
    );
    assert_eq!(refs.lines().count(), 20, "{refs}");
    // Half of them go, in parallel too.
    std::thread::scope(|s| {
        for i in 0..10 {
            let a = vec!["destroy".to_owned(), format!("par-{i}")];
            s.spawn(move || run_all(vec![a]));
        }
    });
    assert_eq!(b.env.json(&["list"]).as_array().map(|a| a.len()), Some(10));
    // `destroy` returns before a box's working files are deleted: they wait in `tmp/` as
    // `discarded-*` for a removal process of their own. Once those are done, nothing else
    // may be left there.
    let tmp_entries = || -> Vec<String> {
        std::fs::read_dir(b.env.path("home/store/tmp"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while tmp_entries().iter().any(|e| e.starts_with("discarded-"))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(tmp_entries(), Vec::<String>::new(), "staging left behind");
    // No half-written record, stray environment, pin or directory either.
    assert_eq!(
        b.env.json(&["prune", "--dry-run", "--min-age", "0"]),
        serde_json::json!([])
    );
    let pins = git(
        &repo,
        &["for-each-ref", "--format=%(refname)", "refs/agentbox/"],
    );
    assert_eq!(pins.lines().count(), 10, "{pins}");
    // A new box takes the next number, not a freed one.
    b.env.ok(&["create", "par-next", "--from", &repo_s]);
    assert_eq!(b.env.json(&["status", "par-next"])["box"]["index"], 21);
    assert_eq!(
        b.sh_ok("par-15", "cat untracked.txt; git branch --show-current"),
        "u\nagentbox/par-15\n"
    );
}
