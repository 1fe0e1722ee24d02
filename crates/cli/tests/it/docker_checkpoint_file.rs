//! `checkpoint export` / `checkpoint import` of a Docker checkpoint through the binary (a
//! real engine): the file carries the manifest and the image (`docker save` of its id);
//! imported in another home and project, it is a checkpoint there a warm Docker box starts
//! from. A malformed file — cut short, an image other than the manifest's, an image with
//! names, over `--max-size` — is refused with a bundle error, and leaves no checkpoint, no
//! ref and no image behind.

use std::io::{Read, Write};
use std::path::Path;

use agentbox_core::Home;

use crate::common::{code, git, stderr, write, Env};
use crate::docker::{engine, on_engine, Sweep};
use crate::docker_history::git_image;

/// A git project at `dir` (its `deps/` ignored).
fn project(dir: &Path) {
    write(&dir.join(".gitignore"), "deps/\n");
    write(&dir.join("a.txt"), "one\n");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "first"]);
}

/// The members of the tar `file` (name, content), in order.
fn members(file: &Path) -> Vec<(String, Vec<u8>)> {
    let mut tar = tar::Archive::new(std::fs::File::open(file).expect("open"));
    tar.entries()
        .expect("entries")
        .map(|e| {
            let mut e = e.expect("entry");
            let name = e.path().expect("path").to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).expect("read");
            (name, data)
        })
        .collect()
}

/// Write `members` as the tar `file`.
fn write_members(file: &Path, members: &[(String, Vec<u8>)]) {
    let mut b = tar::Builder::new(std::fs::File::create(file).expect("create"));
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_slice())
            .expect("append");
    }
    b.into_inner().expect("finish").flush().expect("flush");
}

/// `members` with the saved image's `manifest.json` changed by `edit`.
fn with_saved_manifest(
    members: &[(String, Vec<u8>)],
    edit: impl Fn(&mut serde_json::Value),
) -> Vec<(String, Vec<u8>)> {
    let mut out = members.to_vec();
    let image = &mut out[1].1;
    let mut inner: Vec<(String, Vec<u8>)> = {
        let mut tar = tar::Archive::new(image.as_slice());
        tar.entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("entry");
                let name = e.path().expect("path").to_string_lossy().into_owned();
                let mut data = Vec::new();
                e.read_to_end(&mut data).expect("read");
                (name, data)
            })
            .filter(|(n, _)| !n.ends_with('/'))
            .collect()
    };
    for (name, data) in inner.iter_mut() {
        if name == "manifest.json" {
            let mut v: serde_json::Value = serde_json::from_slice(data).expect("manifest");
            edit(&mut v);
            *data = serde_json::to_vec(&v).expect("json");
        }
    }
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in &inner {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_slice())
            .expect("append");
    }
    *image = b.into_inner().expect("tar");
    out
}

#[test]
fn a_docker_checkpoint_moves_between_homes_as_a_file() {
    let test = "a_docker_checkpoint_moves_between_homes_as_a_file";
    let Some(engine) = engine(test) else { return };
    let image = git_image(&engine);
    let a = Env::new();
    let b = Env::new();
    let (home_a, home_b) = (Home::at(a.path("home")), Home::at(b.path("home")));
    let _sweep_a = Sweep(&engine, home_a.clone());
    let _sweep_b = Sweep(&engine, home_b.clone());
    let (pa, pb) = (a.path("project"), b.path("project"));
    project(&pa);
    project(&pb);
    let name = format!("cf-{}", std::process::id());
    a.run_in(
        &pa,
        &["create", "--provider", "docker", "--image", &image, &name],
    );
    a.ok(&[
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        "mkdir -p deps && echo warm > deps/lib.txt",
    ]);
    let made = a.json(&["checkpoint", "create", &name, "--name", "warm"]);
    let image_id = made["held"]["image_id"].as_str().expect("id").to_owned();
    let file = a.path("warm.ckpt");
    let exported = a.json(&[
        "checkpoint",
        "export",
        "warm",
        "-o",
        &file.to_string_lossy(),
    ]);
    assert!(exported["bytes"].as_u64().expect("bytes") > 0, "{exported}");
    let parts = members(&file);
    let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["agentbox-checkpoint.json", "image.tar"]);

    // Malformed files: refused as bad bundles, nothing left.
    let bad = b.path("bad.ckpt");
    let refused = |file: &Path, extra: &[&str], why: &str| {
        let mut args = vec!["checkpoint", "import"];
        let f = file.to_string_lossy().into_owned();
        args.push(&f);
        args.extend_from_slice(extra);
        let out = b
            .command(&args)
            .current_dir(&pb)
            .output()
            .expect("run agentbox");
        assert_eq!(code(&out), Some(8), "{}", stderr(&out));
        assert!(stderr(&out).contains(why), "{why:?} in:\n{}", stderr(&out));
        assert!(!b.ok(&["checkpoint", "ls", "--all"]).contains("warm"));
    };
    let whole = std::fs::read(&file).expect("read");
    std::fs::write(&bad, &whole[..whole.len() / 2]).expect("write");
    refused(&bad, &[], "its image cannot be read whole");
    write_members(
        &bad,
        &with_saved_manifest(&parts, |v| {
            v[0]["RepoTags"] = serde_json::json!(["busybox:latest"])
        }),
    );
    refused(&bad, &[], "its image carries names");
    write_members(
        &bad,
        &with_saved_manifest(&parts, |v| {
            v[0]["Config"] = serde_json::json!(format!("blobs/sha256/{}", "0".repeat(64)))
        }),
    );
    refused(&bad, &[], "not the checkpoint's");
    refused(&file, &["--max-size", "1000"], "larger than the limit");
    write_members(&bad, &parts[..1]);
    refused(&bad, &[], "not a checkpoint file");
    let leftovers = b.json(&["prune", "--dry-run", "--min-age", "0"]);
    assert_eq!(leftovers, serde_json::json!([]), "nothing half-written");

    // Imported in another home and project: a checkpoint there, a warm box from it.
    let imported: serde_json::Value = serde_json::from_str(&b.run_in(
        &pb,
        &["--json", "checkpoint", "import", &file.to_string_lossy()],
    ))
    .expect("JSON");
    assert_eq!(imported["name"], "warm", "{imported}");
    assert_eq!(
        imported["held"]["image_id"],
        image_id.as_str(),
        "{imported}"
    );
    let tag = imported["held"]["image"].as_str().expect("tag").to_owned();
    assert!(
        tag.starts_with("agentbox-ckpt-p") && tag.ends_with(":warm"),
        "{tag}"
    );
    assert_ne!(
        tag,
        made["held"]["image"].as_str().expect("tag"),
        "the project's name"
    );
    let again = b
        .command(&["checkpoint", "import", &file.to_string_lossy()])
        .current_dir(&pb)
        .output()
        .expect("run agentbox");
    assert_eq!(code(&again), Some(4), "{}", stderr(&again));
    let warm = format!("{name}-b");
    b.run_in(&pb, &["create", "--checkpoint", "warm", &warm]);
    assert_eq!(
        b.ok(&["exec", &warm, "--", "cat", "deps/lib.txt"]),
        "warm\n"
    );
    assert_eq!(
        b.ok(&[
            "exec",
            &warm,
            "--",
            "git",
            "symbolic-ref",
            "--short",
            "HEAD"
        ]),
        format!("agentbox/{warm}\n")
    );

    // Both homes let go of it: nothing of either is left on the engine.
    b.ok(&["destroy", &warm]);
    b.run_in(&pb, &["checkpoint", "rm", "warm"]);
    assert!(engine.image(&tag).expect("inspect").is_none());
    a.ok(&["checkpoint", "rm", "warm"]);
    a.ok(&["destroy", &name]);
    for env in [&a, &b] {
        env.ok(&["gc"]);
        env.ok(&["prune", "--min-age", "0"]);
    }
    assert_eq!(on_engine(&engine, &home_a), (0, 0));
    assert_eq!(on_engine(&engine, &home_b), (0, 0));
    assert!(engine.image(&image_id).expect("inspect").is_none());
}
