//! The `agentbox` command end to end (tier 2: the layers backend mounts an overlay).

use crate::common::{code, log_ids, stderr, write, Env};

#[test]
fn versioned_directory_workflow() {
    if !agentbox_testkit::tier::require_root("versioned_directory_workflow") {
        return;
    }
    let t = Env::new();
    let dir = t.path("proj");
    write(&dir.join("src/main.js"), "console.log(1)\n");
    let created = t.json(&["env", dir.to_str().expect("utf8")]);
    assert_eq!(created["env"]["name"], "proj");
    assert_eq!(created["backend"], "layers");

    // Arguments reach their destination exactly.
    write(&dir.join("src/main.js"), "console.log(2)\n");
    let node = t.json(&[
        "commit",
        "proj",
        "-m",
        "x y",
        "--command",
        "npm run build -- --prod",
    ]);
    assert_eq!(node["message"], "x y");
    assert_eq!(node["command"], "npm run build -- --prod");
    let dash = t.json(&["commit", "proj", "-m", "-m"]);
    assert_eq!(dash["message"], "-m");

    let log = t.json(&["log", "proj"]);
    let nodes = log["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    assert_eq!(log["head"], nodes[2]["id"]);
    let human = t.ok(&["log", "proj"]);
    assert!(human.contains("@ ") && human.contains("(HEAD)"), "{human}");

    let shown = t.json(&["show", "proj", "HEAD~1"]);
    assert_eq!(shown["changes"][0]["path"], "src/main.js");
    assert_eq!(shown["changes"][0]["kind"], "modified");

    t.ok(&["tag", "proj", "v1", "HEAD~2"]);
    t.ok(&["checkout", "proj", "v1"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("src/main.js")).expect("read"),
        "console.log(1)\n"
    );
    let diff = t.json(&["diff", "proj", "v1", "HEAD"]);
    assert_eq!(diff.as_array().map(Vec::len), Some(0));

    let status = t.json(&["status", "proj"]);
    assert_eq!(status["backend"], "layers");
    // Counting and measuring the history is asked for (it costs a walk of it).
    assert!(status["env"].get("disk_bytes").is_none(), "{status}");
    let usage = t.json(&["status", "proj", "--usage"]);
    assert!(usage["env"]["disk_bytes"].as_u64().expect("disk_bytes") > 0);
    assert!(usage["env"]["nodes"].as_u64().expect("nodes") > 0);
    assert_eq!(status["env"]["mounted"], true);
    // The store-wide figures walk the whole store: only the store's own status has them.
    assert!(status.get("nodes").is_none(), "{status}");
    let store = t.json(&["status"]);
    assert!(
        store["disk_bytes"].as_u64().expect("disk_bytes") > 0,
        "{store}"
    );
    assert_eq!(store["nodes"], 3, "{store}");

    let fsck = t.json(&["fsck"]);
    assert_eq!(fsck["problems"].as_array().map(Vec::len), Some(0));

    t.ok(&["unmount", "proj"]);
    assert!(!dir.join("src/main.js").exists() || !agentbox_store::mounts::is_mountpoint(&dir));
    t.ok(&["mount", "proj"]);
    assert!(dir.join("src/main.js").exists());
    t.ok(&["destroy", "proj"]);
    let list = t.json(&["list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0));
}

#[test]
fn errors_have_stable_codes_and_hints() {
    if !agentbox_testkit::tier::require_root("errors_have_stable_codes_and_hints") {
        return;
    }
    let t = Env::new();
    // No store yet.
    let out = t.run(&["log", "x"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("hint:"), "{}", stderr(&out));

    let dir = t.path("env-one");
    t.ok(&["env", dir.to_str().expect("utf8")]);
    let out = t.run(&["checkout", "env-one", "no-such-ref"]);
    assert_eq!(code(&out), Some(3));
    assert!(stderr(&out).contains("no-such-ref"), "{}", stderr(&out));
    let out = t.run(&["log", "nope", "extra"]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    let out = t.run(&["tag", "env-one", "cafe"]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    let out = t.run(&["delete", "env-one", "HEAD"]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    let out = t.run(&["env", dir.to_str().expect("utf8")]);
    assert_eq!(code(&out), Some(4), "{}", stderr(&out));
    let out = t.run(&["--json", "checkout", "env-one", "zzzz"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(v["code"], 3);

    // A second writer is refused with the holder named.
    let lock = t.path("home/store/envs/env-one/lock");
    let _held = agentbox_core::lock::FileLock::acquire(
        &lock,
        agentbox_core::lock::Mode::TryExclusive,
        "env",
        "a long commit",
    )
    .expect("hold");
    let out = t.run(&["commit", "env-one", "-m", "blocked"]);
    assert_eq!(code(&out), Some(5), "{}", stderr(&out));
    assert!(stderr(&out).contains("a long commit"), "{}", stderr(&out));
}

#[test]
fn bad_bundles_leave_nothing_behind() {
    if !agentbox_testkit::tier::require_root("bad_bundles_leave_nothing_behind") {
        return;
    }
    let t = Env::new();
    let dir = t.path("bun-one");
    write(&dir.join("f"), "data");
    t.ok(&["env", dir.to_str().expect("utf8")]);
    let bundle = t.path("bun-one.bundle");
    t.ok(&["export", "bun-one", "-o", bundle.to_str().expect("utf8")]);
    let bytes = std::fs::read(&bundle).expect("read");
    let cut = t.path("cut.bundle");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let out = t.run(&[
        "import",
        cut.to_str().expect("utf8"),
        "--dir",
        t.path("cut").to_str().expect("utf8"),
    ]);
    assert_eq!(code(&out), Some(8), "{}", stderr(&out));
    let list = t.json(&["list"]);
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(1),
        "no environment was created"
    );
    let tmp = t.path("home/store/tmp");
    assert_eq!(
        std::fs::read_dir(&tmp).expect("tmp").count(),
        0,
        "staging removed"
    );
    // The intact bundle imports.
    let imported = t.json(&[
        "import",
        bundle.to_str().expect("utf8"),
        "--dir",
        t.path("bun-two").to_str().expect("utf8"),
    ]);
    assert_eq!(imported["env"], "bun-two");
    assert_eq!(
        std::fs::read_to_string(t.path("bun-two/f")).expect("read"),
        "data"
    );
}

#[test]
fn non_root_users_are_told_why() {
    if !agentbox_testkit::tier::require_root("non_root_users_are_told_why") {
        return;
    }
    // Run as nobody with a home nobody can write.
    let t = Env::new();
    let base = t.home.path();
    std::fs::set_permissions(base, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let dir = base.join("nobody-proj");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_agentbox"))
        .arg("env")
        .arg(&dir)
        .env("AGENTBOX_HOME", base.join("nobody-home"))
        .output()
        .expect("setpriv");
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(stderr(&out).contains("root"), "{}", stderr(&out));
}

/// Serve one file over HTTP on a loopback port (enough for a GET of a tarball).
fn serve_once(body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    format!("http://{addr}/rootfs.tar.gz")
}

#[test]
fn environments_from_rootfs_tarballs_and_urls() {
    if !agentbox_testkit::tier::require_root("environments_from_rootfs_tarballs_and_urls") {
        return;
    }
    let t = Env::new();
    let tree = t.path("rootfs");
    write(&tree.join("etc/os-release"), "ID=test\n");
    write(&tree.join("bin/tool"), "#!/bin/sh\n");
    std::os::unix::fs::symlink("/bin/tool", tree.join("bin/alias")).expect("symlink");
    let tarball = t.path("rootfs.tar.gz");
    let ok = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&tree)
        .arg(".")
        .status()
        .expect("tar");
    assert!(ok.success());
    let from_file = t.path("from-file");
    t.ok(&[
        "env",
        from_file.to_str().expect("utf8"),
        "--from",
        tarball.to_str().expect("utf8"),
    ]);
    assert_eq!(
        std::fs::read_to_string(from_file.join("etc/os-release")).expect("read"),
        "ID=test\n"
    );
    assert_eq!(
        std::fs::read_link(from_file.join("bin/alias")).expect("link"),
        std::path::PathBuf::from("/bin/tool")
    );
    let url = serve_once(std::fs::read(&tarball).expect("read"));
    let from_url = t.path("from-url");
    t.ok(&["env", from_url.to_str().expect("utf8"), "--from", &url]);
    assert!(from_url.join("bin/tool").exists());
    // A bad URL is a clear error and leaves no environment.
    let out = t.run(&[
        "env",
        t.path("nothing").to_str().expect("utf8"),
        "--from",
        "http://127.0.0.1:9/none.tar",
    ]);
    assert_ne!(code(&out), Some(0));
    assert!(stderr(&out).contains("download"), "{}", stderr(&out));
    let list = t.json(&["list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(2));
}

#[test]
fn setup_btrfs_gives_a_btrfs_store() {
    if !agentbox_testkit::tier::require_root("setup_btrfs_gives_a_btrfs_store") {
        return;
    }
    let t = Env::new();
    let image = t.path("store.img");
    let report = t.json(&[
        "setup",
        "--btrfs",
        "1G",
        "--image",
        image.to_str().expect("utf8"),
    ]);
    assert!(
        report["undo"].as_array().is_some_and(|u| !u.is_empty()),
        "{report}"
    );
    assert!(report["fstab_line"]
        .as_str()
        .is_some_and(|l| l.contains("btrfs")));
    // Neither other local users nor boxes read the store's image.
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&image), 0o600);
    assert_eq!(mode(&t.path("home/store")), 0o700);
    // Setting up twice is refused.
    let again = t.run(&[
        "setup",
        "--btrfs",
        "1G",
        "--image",
        image.to_str().expect("utf8"),
    ]);
    assert_eq!(code(&again), Some(4), "{}", stderr(&again));

    let dir = t.path("on-btrfs");
    write(&dir.join("f"), "1");
    let created = t.json(&["env", dir.to_str().expect("utf8")]);
    assert_eq!(created["backend"], "btrfs");
    write(&dir.join("f"), "2");
    t.ok(&["commit", "on-btrfs", "-m", "two"]);
    t.ok(&["checkout", "on-btrfs", "HEAD~1"]);
    assert_eq!(std::fs::read_to_string(dir.join("f")).expect("read"), "1");
    let status = t.json(&["status"]);
    assert_eq!(status["backend"], "btrfs");
    assert_eq!(status["backend_chosen"], "auto");
    t.ok(&["destroy", "on-btrfs"]);
    // Undo as the report says (the test home's cleanup would also unmount it).
    agentbox_testkit::unmount_below(&t.path("home"));
}

#[test]
fn imported_history_shows_its_tagged_nodes() {
    if !agentbox_testkit::tier::require_root("imported_history_shows_its_tagged_nodes") {
        return;
    }
    let t = Env::new();
    let dir = t.path("orig");
    write(&dir.join("f"), "1");
    t.ok(&["env", dir.to_str().expect("utf8")]);
    write(&dir.join("f"), "2");
    let later = t.json(&["commit", "orig", "-m", "later"]);
    t.ok(&["tag", "orig", "later-work", "HEAD"]);
    t.ok(&["checkout", "orig", "HEAD~1"]);
    let bundle = t.path("orig.bundle");
    t.ok(&["export", "orig", "-o", bundle.to_str().expect("utf8")]);
    // Into the same store: the nodes are shared, the new environment owns none of them.
    t.ok(&[
        "import",
        bundle.to_str().expect("utf8"),
        "--dir",
        t.path("again").to_str().expect("utf8"),
    ]);
    let log = t.json(&["log", "again"]);
    let ids = log_ids(&log);
    assert!(ids.contains(&later["id"].as_str().expect("id")), "{log}");
    assert_eq!(log["tags"]["later-work"], later["id"]);
}
