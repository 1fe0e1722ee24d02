//! `agentbox cp` and `agentbox download` on real boxes (tier 2: root). What a box plants —
//! symlinks to host paths, hard links, FIFOs — is never made or followed on the host, even
//! while the box swaps a symlink and a directory under the copy; nothing is written outside
//! the destination.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::{json, Value};

use crate::common::{git, write, Env};
use agentbox_testkit::tier::require_root;

fn project(env: &Env) -> std::path::PathBuf {
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    write(&project.join(".gitignore"), "node_modules\n.env\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    project
}

/// Every path below `root` that is not a regular file or a directory.
fn not_plain(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).expect("lstat");
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).expect("ls") {
                stack.push(e.expect("entry").path());
            }
        } else if !meta.is_file() {
            out.push(p.display().to_string());
        } else if meta.nlink() != 1 {
            out.push(format!("{} (hard-linked)", p.display()));
        }
    }
    out
}

#[test]
fn copying_out_makes_only_files_and_directories_while_the_box_swaps_a_symlink() {
    let test = "cp::copying_out_makes_only_files_and_directories_while_the_box_swaps_a_symlink";
    if !require_root(test) {
        return;
    }
    let env = Env::new();
    let project = project(&env);
    env.run_in(&project, &["create", "c1"]);
    // A host directory the box's links point at: nothing may ever be written there.
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let plant = format!(
        "mkdir -p d/many && echo x > d/f && chmod 750 d/f && ln -s {o} d/out && ln -s /etc/passwd d/passwd \
         && ln d/f d/hard && mkfifo d/fifo && for i in $(seq 1 300); do echo $i > d/many/$i; done",
        o = outside.display()
    );
    env.ok(&["exec", "c1", "--", "sh", "-c", &plant]);

    // The race: in the box, `d/many/sw` flips between a symlink to the host directory and
    // a directory, as fast as the box can.
    let race = format!(
        "i=0; while [ $i -lt 100000 ]; do rm -rf d/many/sw; ln -s {o} d/many/sw; rm -f d/many/sw; mkdir d/many/sw; echo y > d/many/sw/z; i=$((i+1)); done",
        o = outside.display()
    );
    let mut racer = env
        .command(&["exec", "c1", "--", "sh", "-c", &race])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the race");
    let mut copied = 0;
    for round in 0..8 {
        let dest = env.path(&format!("out{round}"));
        std::fs::create_dir_all(&dest).expect("mkdir");
        let out = env.run(&["--json", "cp", "c1:d", dest.to_str().expect("utf-8")]);
        // A file vanishing under the box's tar may fail a round; what is on the host must
        // hold either way.
        if !out.status.success() {
            eprintln!("round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        if out.status.success() {
            copied += 1;
            let done: Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let kinds: Vec<&str> = done["skipped"]
                .as_array()
                .expect("skipped")
                .iter()
                .map(|s| s["kind"].as_str().expect("kind"))
                .collect();
            assert!(
                kinds.contains(&"symlink") && kinds.contains(&"fifo"),
                "{done}"
            );
        }
        assert_eq!(not_plain(&dest), Vec::<String>::new(), "round {round}");
        assert_eq!(
            std::fs::read_dir(&outside).expect("ls").count(),
            0,
            "nothing written through a box's symlink"
        );
    }
    let _ = racer.kill();
    let _ = racer.wait();
    assert!(copied > 0, "no round of the copy succeeded");

    // A quieter copy: the files, their modes, and every link and device reported.
    let dest = env.path("quiet");
    std::fs::create_dir_all(&dest).expect("mkdir");
    // (The race's directory left out: its last state is whatever it was when stopped.)
    let done = env.json(&[
        "cp",
        "--exclude",
        "sw",
        "c1:d",
        dest.to_str().expect("utf-8"),
    ]);
    assert_eq!(std::fs::read_to_string(dest.join("d/f")).expect("f"), "x\n");
    let mode = std::fs::metadata(dest.join("d/f"))
        .expect("f")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    assert_eq!(
        std::fs::read_to_string(dest.join("d/many/300")).expect("300"),
        "300\n"
    );
    let mut skipped: Vec<(String, String)> = done["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| {
            let p = s["path"].as_str().expect("path");
            let name = p.rsplit('/').next().expect("name").to_owned();
            (name, s["kind"].as_str().expect("kind").to_owned())
        })
        .collect();
    skipped.sort();
    assert_eq!(
        skipped,
        [
            ("fifo".to_owned(), "fifo".to_owned()),
            ("hard".to_owned(), "hard link".to_owned()),
            ("out".to_owned(), "symlink".to_owned()),
            ("passwd".to_owned(), "symlink".to_owned()),
        ]
    );
    assert_eq!(not_plain(&dest), Vec::<String>::new());

    // A symlink the host already has in the destination is not walked through either.
    let dest = env.path("trap");
    std::fs::create_dir_all(&dest).expect("mkdir");
    std::os::unix::fs::symlink(&outside, dest.join("d")).expect("symlink");
    let out = env.run(&["cp", "c1:d", dest.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
}

#[test]
fn copying_in_makes_a_node_and_download_takes_what_git_keeps() {
    let test = "cp::copying_in_makes_a_node_and_download_takes_what_git_keeps";
    if !require_root(test) {
        return;
    }
    let env = Env::new();
    let project = project(&env);
    env.run_in(&project, &["create", "c2"]);
    let host = env.path("host");
    write(&host.join("dir/x.txt"), "hi\n");
    write(&host.join("dir/skip.log"), "no\n");
    std::fs::set_permissions(
        host.join("dir/x.txt"),
        std::fs::Permissions::from_mode(0o751),
    )
    .expect("chmod");
    let before = env.json(&["log", "c2", "--ancestors"]);
    let done = env.json(&[
        "cp",
        "--exclude",
        "*.log",
        host.join("dir").to_str().expect("utf-8"),
        "c2:sub",
    ]);
    assert_eq!((&done["files"], &done["dirs"]), (&json!(1), &json!(1)));
    let node = done["node"].as_str().expect("a node").to_owned();
    let after = env.json(&["log", "c2", "--ancestors"]);
    assert_eq!(after[0]["id"], json!(node));
    assert_eq!(
        after.as_array().map(Vec::len),
        before.as_array().map(|v| v.len() + 1)
    );
    assert_eq!(env.ok(&["exec", "c2", "--", "cat", "sub/x.txt"]), "hi\n");
    assert_eq!(
        env.ok(&["exec", "c2", "--", "stat", "-c", "%a", "sub/x.txt"]),
        "751\n"
    );
    assert_eq!(
        env.run(&["exec", "c2", "--", "test", "-e", "sub/skip.log"])
            .status
            .code(),
        Some(1),
        "excluded"
    );

    // download: what git keeps (and the repository), not node_modules or .env; with
    // --with-env the env file too; --all everything.
    env.ok(&[
        "exec",
        "c2",
        "--",
        "sh",
        "-c",
        "mkdir -p node_modules && echo m > node_modules/m && echo S=1 > .env",
    ]);
    let dl = env.path("dl");
    env.ok(&["download", "c2", "--to", dl.to_str().expect("utf-8")]);
    assert_eq!(
        std::fs::read_to_string(dl.join("a.txt")).expect("a"),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(dl.join("sub/x.txt")).expect("x"),
        "hi\n"
    );
    assert!(dl.join(".git/HEAD").exists());
    assert!(!dl.join("node_modules").exists() && !dl.join(".env").exists());
    let dl = env.path("dl-env");
    env.ok(&[
        "download",
        "c2",
        "--with-env",
        "--to",
        dl.to_str().expect("utf-8"),
    ]);
    assert!(dl.join(".env").exists() && !dl.join("node_modules").exists());
    let dl = env.path("dl-all");
    env.ok(&[
        "download",
        "c2",
        "--all",
        "--to",
        dl.to_str().expect("utf-8"),
    ]);
    assert!(dl.join(".env").exists() && dl.join("node_modules/m").exists());

    // Over the size cap: refused with the cap named.
    let out = env.run(&[
        "cp",
        "--max-size",
        "2",
        "c2:a.txt",
        env.path("capped").to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("size cap of 2 bytes"));
}
