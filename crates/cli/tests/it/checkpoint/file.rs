//! A checkpoint as one file: moved to another home, and a crafted file refused.

use std::path::PathBuf;

use crate::common::{git, Env};

use super::*;

#[test]
fn a_checkpoint_moves_to_another_home_as_one_file() {
    let Some((h, proj)) = setup("a_checkpoint_moves_to_another_home_as_one_file") else {
        return;
    };
    warm_box(&h, &proj);
    h.env
        .ok(&["checkpoint", "create", "warm", "--name", "deps"]);
    let file = h.env.path("deps.ckpt");
    let file = file.to_str().expect("utf-8");
    let out = h.env.json(&["checkpoint", "export", "deps", "-o", file]);
    assert_eq!(out["name"], "deps");
    // Another home (another machine), its own clone of the project.
    let other = Home { env: Env::new() };
    let clone = other.env.home.path().join("clone");
    git(
        other.env.home.path(),
        &["clone", "-q", proj.to_str().expect("utf-8"), "clone"],
    );
    let imported = other
        .env
        .run_in(&clone, &["--json", "checkpoint", "import", file]);
    let imported: serde_json::Value = serde_json::from_str(&imported).expect("json");
    assert_eq!(imported["name"], "deps");
    assert_eq!(imported["state"], "fresh");
    assert_eq!(
        imported["project"].as_str().map(PathBuf::from),
        Some(std::fs::canonicalize(&clone).expect("canonical"))
    );
    let from = clone.to_str().expect("utf-8");
    other
        .env
        .ok(&["create", "b", "--from", from, "--checkpoint", "deps"]);
    assert_eq!(
        other.sh("b", "cat /workspace/node_modules/dep/index.js"),
        "warm\n"
    );
    assert_eq!(other.sh("b", "cat /workspace/src.txt"), "v1\n");
    // The same name twice is refused; a damaged file imports nothing.
    let again = other
        .env
        .command(&["checkpoint", "import", file])
        .current_dir(&clone)
        .output()
        .expect("run");
    assert_eq!(
        again.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let bad = other.env.path("bad.ckpt");
    let mut bytes = std::fs::read(file).expect("read");
    let cut = bytes.len() / 2;
    bytes.truncate(cut);
    std::fs::write(&bad, &bytes).expect("write");
    let broken = other
        .env
        .command(&[
            "checkpoint",
            "import",
            bad.to_str().expect("utf-8"),
            "--name",
            "broken",
        ])
        .current_dir(&clone)
        .output()
        .expect("run");
    assert_ne!(broken.status.code(), Some(0));
    let list = other.env.json(&["checkpoint", "ls", "--all"]);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

/// A checkpoint file is another machine's (or a box's) data: a manifest whose base image
/// names a path (`../..`: the host's own tree, without the hiding of homes a host base has)
/// or whose names carry control characters is refused, and leaves nothing behind.
#[test]
fn a_crafted_checkpoint_file_is_refused() {
    let Some((h, proj)) = setup("a_crafted_checkpoint_file_is_refused") else {
        return;
    };
    warm_box(&h, &proj);
    h.env
        .ok(&["checkpoint", "create", "warm", "--name", "deps"]);
    let good = h.env.path("deps.ckpt");
    h.env.ok(&[
        "checkpoint",
        "export",
        "deps",
        "-o",
        good.to_str().expect("utf-8"),
    ]);
    let craft = |name: &str, change: &dyn Fn(&mut serde_json::Value)| -> PathBuf {
        let out = h.env.path(name);
        let mut read = tar::Archive::new(std::fs::File::open(&good).expect("open"));
        let mut write = tar::Builder::new(std::fs::File::create(&out).expect("create"));
        for entry in read.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").into_owned();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).expect("read");
            if path == std::path::Path::new("agentbox-checkpoint.json") {
                let mut m: serde_json::Value = serde_json::from_slice(&data).expect("json");
                change(&mut m);
                data = serde_json::to_vec(&m).expect("json");
            }
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            write
                .append_data(&mut header, &path, data.as_slice())
                .expect("append");
        }
        write.finish().expect("finish");
        out
    };
    let other = Home { env: Env::new() };
    for (file, want) in [
        (
            craft("image.ckpt", &|m| m["base"]["image"] = "../../..".into()),
            "not an image name",
        ),
        (
            craft("lineage.ckpt", &|m| {
                m["lineage"] = serde_json::json!(["x\u{1b}[2J"])
            }),
            "not a checkpoint name",
        ),
    ] {
        let out = other
            .env
            .run(&["checkpoint", "import", file.to_str().expect("utf-8")]);
        assert_eq!(
            out.status.code(),
            Some(8),
            "{}",
            crate::common::stderr(&out)
        );
        assert!(
            crate::common::stderr(&out).contains(want),
            "{}",
            crate::common::stderr(&out)
        );
    }
    let list = other.env.json(&["checkpoint", "ls", "--all"]);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
    let refs = other.env.path("home/store/refs/checkpoints");
    assert!(!refs.exists() || std::fs::read_dir(&refs).expect("refs").next().is_none());
}
