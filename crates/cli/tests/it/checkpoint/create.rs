//! Capturing a box and starting boxes from the checkpoint: warm, on a fresh branch at the
//! host's present; defaults, names, removal; no secret kept; from inside a box; the lineage;
//! many boxes at once; a stale base.

use crate::common::{git, write};

use super::*;

#[test]
fn a_box_from_a_checkpoint_is_warm_on_a_fresh_branch_at_the_hosts_present() {
    let Some((h, proj)) =
        setup("a_box_from_a_checkpoint_is_warm_on_a_fresh_branch_at_the_hosts_present")
    else {
        return;
    };
    warm_box(&h, &proj);
    let made = h
        .env
        .json(&["checkpoint", "create", "warm", "--name", "deps"]);
    assert_eq!(made["name"], "deps");
    assert_eq!(made["kind"], "layered");
    assert_eq!(made["state"], "fresh");
    // The host moves on: a new commit, uncommitted work, an untracked file, and an
    // untracked file the checkpoint holds (ignored there).
    write(&proj.join("src.txt"), "v2 from the host\n");
    git(&proj, &["commit", "-qam", "second"]);
    let host_head = git(&proj, &["rev-parse", "HEAD"]);
    write(&proj.join("README"), "host's uncommitted edit\n");
    write(&proj.join("new.txt"), "host's untracked file\n");
    write(&proj.join("local.cfg"), "host cfg\n");

    let rec = h.env.json(&[
        "create",
        "b",
        "--from",
        proj.to_str().expect("utf-8"),
        "--checkpoint",
        "deps",
    ]);
    assert_eq!(rec["checkpoint"], "deps");
    assert_eq!(rec["lineage"], serde_json::json!(["deps"]));
    assert_eq!(rec["resync_conflicts"], serde_json::json!(["local.cfg"]));
    let branch = rec["repos"][0]["branch"]
        .as_str()
        .expect("branch")
        .to_owned();
    assert_eq!(branch, "agentbox/b");
    let cat = |p: &str| {
        h.sh(
            "b",
            &format!("cat /workspace/{p} 2>/dev/null || echo MISSING"),
        )
    };
    assert_eq!(
        cat("node_modules/dep/index.js"),
        "warm\n",
        "the warm state stays"
    );
    assert_eq!(
        cat("src.txt"),
        "v2 from the host\n",
        "tracked files as at the host's commit"
    );
    assert_eq!(cat("README"), "host's uncommitted edit\n");
    assert_eq!(cat("new.txt"), "host's untracked file\n");
    assert_eq!(
        cat("local.cfg"),
        "checkpoint cfg\n",
        "a collision keeps the box's"
    );
    assert_eq!(
        h.sh("b", "cat /run/agentbox/ctl/resync-conflicts"),
        "local.cfg\n"
    );
    assert_eq!(
        h.sh(
            "b",
            "cd /workspace && git rev-parse HEAD && git symbolic-ref --short HEAD"
        ),
        format!("{}\n{branch}\n", host_head.trim())
    );
    let log = h.sh("b", "cd /workspace && git log --format=%s");
    assert!(
        !log.contains("box work"),
        "the checkpoint's commits are not the new box's: {log}"
    );
    let status = h.sh("b", "cd /workspace && git status --porcelain");
    assert!(status.contains(" M README"), "{status}");
    assert!(status.contains("?? new.txt"), "{status}");
    // The source box is untouched and keeps its own branch.
    assert_eq!(h.sh("warm", "cat /workspace/src.txt"), "box edit\n");
    let human = h.env.ok(&["status", "b"]);
    assert!(human.contains("checkpoint:   deps"), "{human}");
    assert!(human.contains("local.cfg"), "{human}");
}

#[test]
fn no_resync_rebranches_without_the_hosts_uncommitted_work() {
    let Some((h, proj)) = setup("no_resync_rebranches_without_the_hosts_uncommitted_work") else {
        return;
    };
    warm_box(&h, &proj);
    h.env
        .ok(&["checkpoint", "create", "warm", "--name", "deps"]);
    write(&proj.join("README"), "host's uncommitted edit\n");
    write(&proj.join("new.txt"), "untracked\n");
    let from = proj.to_str().expect("utf-8");
    h.env.ok(&[
        "create",
        "c",
        "--from",
        from,
        "--checkpoint",
        "deps",
        "--no-resync",
    ]);
    assert_eq!(h.sh("c", "cat /workspace/README"), "readme\n");
    assert_eq!(
        h.sh("c", "test -e /workspace/new.txt && echo yes || echo no"),
        "no\n"
    );
    assert_eq!(
        h.sh("c", "cat /workspace/node_modules/dep/index.js"),
        "warm\n"
    );
    assert_eq!(h.sh("c", "cat /workspace/src.txt"), "v1\n");
}

#[test]
fn defaults_names_removal_and_the_source_boxs_destroy() {
    let Some((h, proj)) = setup("defaults_names_removal_and_the_source_boxs_destroy") else {
        return;
    };
    warm_box(&h, &proj);
    let from = proj.to_str().expect("utf-8");
    let first = h.env.json(&["checkpoint", "create", "warm"]);
    assert_eq!(first["name"], "warm-1");
    let second = h
        .env
        .json(&["checkpoint", "create", "warm", "--set-default"]);
    assert_eq!(second["name"], "warm-2");
    assert_eq!(second["default"], true);
    let again = h
        .env
        .run(&["checkpoint", "create", "warm", "--name", "warm-1"]);
    assert_eq!(again.status.code(), Some(4), "an existing name is refused");
    h.env.ok(&[
        "checkpoint",
        "create",
        "warm",
        "--name",
        "warm-1",
        "--replace",
    ]);
    // The source box goes; its checkpoints stay usable.
    h.env.ok(&["destroy", "warm"]);
    h.env.ok(&["gc"]);
    let plain = h.env.json(&["create", "d", "--from", from]);
    assert_eq!(
        plain["checkpoint"], "warm-2",
        "a plain create uses the default"
    );
    assert_eq!(
        h.sh("d", "cat /workspace/node_modules/dep/index.js"),
        "warm\n"
    );
    let cold = h
        .env
        .json(&["create", "e", "--from", from, "--no-checkpoint"]);
    assert!(cold.get("checkpoint").is_none(), "{cold}");
    assert_eq!(
        h.sh(
            "e",
            "test -e /workspace/node_modules && echo yes || echo no"
        ),
        "no\n"
    );
    // rm: the default goes with it, names are never reused.
    h.env.ok(&["checkpoint", "rm", "warm-2"]);
    let listed = h.env.json(&["checkpoint", "ls", "--all"]);
    let names: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["warm-1"]);
    let plain = h.env.json(&["create", "f", "--from", from]);
    assert!(
        plain.get("checkpoint").is_none(),
        "no default after rm: {plain}"
    );
    h.env.ok(&["checkpoint", "create", "f"]);
    let gone = h.env.run(&["checkpoint", "show", "warm-2"]);
    assert_eq!(gone.status.code(), Some(3));
}

#[test]
fn a_checkpoint_holds_no_secret_of_its_box() {
    let Some((h, proj)) = setup("a_checkpoint_holds_no_secret_of_its_box") else {
        return;
    };
    write(&proj.join(".env"), "API_KEY=sk-carried-secret-4242\n");
    write(&proj.join(".gitignore"), "node_modules/\n.env\n");
    git(&proj, &["commit", "-qam", "ignore .env"]);
    let from = proj.to_str().expect("utf-8");
    h.env.ok(&[
        "create",
        "s",
        "--from",
        from,
        "--with-env",
        "--env",
        "TOKEN=sk-env-secret-9191",
    ]);
    assert_eq!(
        h.sh("s", "cat /workspace/.env"),
        "API_KEY=sk-carried-secret-4242\n"
    );
    h.sh(
        "s",
        "mkdir -p /root/.claude && echo sk-agent-cred-7373 > /root/.claude/.credentials.json && echo warm > /workspace/node_modules.txt",
    );
    let made = h
        .env
        .json(&["checkpoint", "create", "s", "--name", "clean"]);
    let node = made["node"].as_str().expect("node").to_owned();
    let manifest = made.to_string();
    for secret in [
        "sk-carried-secret-4242",
        "sk-env-secret-9191",
        "sk-agent-cred-7373",
    ] {
        assert!(!manifest.contains(secret), "{secret} in the manifest");
    }
    // Every byte of the checkpoint's tree, as a box made from it sees it.
    // The host user's toolchains and caches shown under /root (read-only from the host,
    // whatever this machine has there) are not the checkpoint's to search.
    let grep = "grep -rls --exclude-dir=.cargo --exclude-dir=.rustup --exclude-dir=.pyenv --exclude-dir=.nvm --exclude-dir=.volta --exclude-dir=.bun --exclude-dir=.deno --exclude-dir=go --exclude-dir=.npm --exclude-dir=.cache -e sk-carried-secret-4242 -e sk-env-secret-9191 -e sk-agent-cred-7373 /workspace /root 2>/dev/null; true";
    let o = h.env.ok(&[
        "create",
        "t",
        "--from",
        from,
        "--checkpoint",
        "clean",
        "--no-resync",
    ]);
    assert!(!o.is_empty());
    let found = h.sh("t", grep);
    assert_eq!(
        found, "",
        "secrets in a box made from the checkpoint: {found}"
    );
    // And in the store: the checkpoint node's own layer files.
    let store = h.env.path("home").join("store");
    let out = std::process::Command::new("grep")
        .args([
            "-rl",
            "-e",
            "sk-env-secret-9191",
            "-e",
            "sk-agent-cred-7373",
        ])
        .arg(store.join("nodes").join(format!("{node}.json")))
        .output()
        .expect("grep");
    assert!(
        out.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn inside_a_box_checkpoint_create_captures_its_own_box_only() {
    let Some((h, proj)) = setup("inside_a_box_checkpoint_create_captures_its_own_box_only") else {
        return;
    };
    let from = proj.to_str().expect("utf-8");
    h.env.ok(&["create", "me", "--from", from]);
    h.env.ok(&["create", "other", "--from", from]);
    let out = h.sh(
        "me",
        "agentbox checkpoint create --name from-inside && echo done",
    );
    assert!(out.contains("done"), "{out}");
    let c = h.env.json(&["checkpoint", "show", "from-inside"]);
    assert_eq!(c["source_box"], "me");
    let refused = h.env.run(&[
        "exec",
        "me",
        "--",
        "sh",
        "-c",
        "agentbox checkpoint create other",
    ]);
    assert_ne!(refused.status.code(), Some(0));
}

#[test]
fn the_lineage_grows_per_box_and_flattens_at_max_layers() {
    let Some((h, proj)) = setup("the_lineage_grows_per_box_and_flattens_at_max_layers") else {
        return;
    };
    let from = proj.to_str().expect("utf-8");
    h.env.ok(&["create", "b0", "--from", from]);
    h.sh(
        "b0",
        "mkdir -p /workspace/node_modules && echo 0 > /workspace/node_modules/gen",
    );
    let mut kinds = Vec::new();
    for i in 0..4 {
        let c = h.env.json(&[
            "checkpoint",
            "create",
            &format!("b{i}"),
            "--name",
            &format!("cp{i}"),
        ]);
        kinds.push(c["kind"].as_str().expect("kind").to_owned());
        let lineage: Vec<String> = (0..i).rev().map(|j| format!("cp{j}")).collect();
        assert_eq!(c["lineage"], serde_json::json!(lineage), "checkpoint c{i}");
        let next = format!("b{}", i + 1);
        let rec = h.env.json(&[
            "create",
            &next,
            "--from",
            from,
            "--checkpoint",
            &format!("cp{i}"),
        ]);
        let mut want = vec![format!("cp{i}")];
        want.extend(lineage);
        assert_eq!(rec["lineage"], serde_json::json!(want));
        h.sh(
            &next,
            &format!("echo {} > /workspace/node_modules/gen", i + 1),
        );
    }
    // The box of cp3 has a lineage of 3 (cp2, cp1, cp0): its checkpoint is the one flattened.
    assert_eq!(kinds, vec!["layered", "layered", "layered", "flattened"]);
    // Capturing the same box again does not deepen the lineage.
    let again = h
        .env
        .json(&["checkpoint", "create", "b1", "--name", "again"]);
    assert_eq!(again["lineage"], serde_json::json!(["cp0"]));
    let merged = h.env.json(&["checkpoint", "create", "b1", "--merged"]);
    assert_eq!(merged["kind"], "flattened");
    // A flattened checkpoint still starts a warm box.
    h.env
        .ok(&["create", "z", "--from", from, "--checkpoint", "cp3"]);
    assert_eq!(h.sh("z", "cat /workspace/node_modules/gen"), "3\n");
}

#[test]
fn twenty_boxes_from_one_checkpoint_at_once_share_nothing() {
    let Some((h, proj)) = setup("twenty_boxes_from_one_checkpoint_at_once_share_nothing") else {
        return;
    };
    warm_box(&h, &proj);
    h.env
        .ok(&["checkpoint", "create", "warm", "--name", "deps"]);
    let from = proj.to_str().expect("utf-8");
    let children: Vec<_> = (0..20)
        .map(|_| {
            h.env
                .command(&["--json", "create", "--from", from, "--checkpoint", "deps"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut records = Vec::new();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        records.push(serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json"));
    }
    let set = |key: &dyn Fn(&serde_json::Value) -> String| {
        records
            .iter()
            .map(key)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(set(&|r| r["name"].to_string()).len(), 20);
    assert_eq!(set(&|r| r["id"].to_string()).len(), 20);
    assert_eq!(set(&|r| r["repos"][0]["branch"].to_string()).len(), 20);
    let mut numbers: Vec<u64> = records
        .iter()
        .map(|r| r["index"].as_u64().expect("index"))
        .collect();
    numbers.sort();
    assert_eq!(
        numbers,
        (2..=21).collect::<Vec<_>>(),
        "numbers after the source's #1, no gap"
    );
    // Each box's repository is its own: a commit in one is in no other.
    let first = records[0]["name"].as_str().expect("name").to_owned();
    h.sh(
        &first,
        "cd /workspace && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m only-here",
    );
    for r in &records[1..] {
        let name = r["name"].as_str().expect("name");
        let log = h.sh(name, "cd /workspace && git log --format=%s");
        assert!(
            !log.contains("only-here"),
            "{name} shares a repository: {log}"
        );
        assert_eq!(
            h.sh(name, "cat /workspace/node_modules/dep/index.js"),
            "warm\n"
        );
    }
}

#[test]
fn a_checkpoint_on_a_changed_or_removed_image_is_stale_then_pruned() {
    let Some((h, proj)) = setup("a_checkpoint_on_a_changed_or_removed_image_is_stale_then_pruned")
    else {
        return;
    };
    let tar = h.env.path("rootfs.tar");
    agentbox_testkit::rootfs::build_tar(h.env.home.path(), &tar);
    let tar = tar.to_str().expect("utf-8").to_owned();
    let from = proj.to_str().expect("utf-8");
    h.env.ok(&["image", "import", "mini", &tar]);
    h.env
        .ok(&["create", "img", "--from", from, "--image", "mini"]);
    h.env
        .ok(&["checkpoint", "create", "img", "--name", "onmini"]);
    let fresh = h.env.json(&["checkpoint", "show", "onmini"]);
    assert_eq!(fresh["state"], "fresh");
    // The image is imported again under the same name: the checkpoint's base changed.
    h.env.ok(&["destroy", "img"]);
    h.env.ok(&["image", "rm", "mini"]);
    let gone = h.env.json(&["checkpoint", "show", "onmini"]);
    assert_eq!(gone["state"], "base-missing");
    let refused = h
        .env
        .run(&["create", "x", "--from", from, "--checkpoint", "onmini"]);
    assert_eq!(refused.status.code(), Some(4));
    h.env.ok(&["image", "import", "mini", &tar]);
    let stale = h.env.json(&["checkpoint", "ls", "--all"]);
    assert_eq!(stale[0]["state"], "stale");
    // Not on a terminal: a warning, and the box is made.
    let out = h
        .env
        .run(&["create", "y", "--from", from, "--checkpoint", "onmini"]);
    assert!(out.status.success(), "{}", crate::common::stderr(&out));
    assert!(
        crate::common::stderr(&out).contains("has changed since"),
        "{}",
        crate::common::stderr(&out)
    );
    // prune removes a checkpoint whose base is gone, and only that one.
    h.env.ok(&["destroy", "y"]);
    h.env.ok(&["image", "rm", "mini"]);
    h.env.ok(&["create", "keep", "--from", from]);
    h.env
        .ok(&["checkpoint", "create", "keep", "--name", "alive"]);
    let dry = h.env.json(&["prune", "--dry-run", "--min-age", "0"]);
    let rows: Vec<&serde_json::Value> = dry
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["kind"] == "checkpoint")
        .collect();
    assert_eq!(rows.len(), 1, "{dry}");
    assert!(rows[0]["what"].as_str().expect("what").contains("onmini"));
    h.env.ok(&["prune", "--min-age", "0"]);
    let left = h.env.json(&["checkpoint", "ls", "--all"]);
    let names: Vec<&str> = left
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["alive"]);
}
