//! `checkpoint import` of a Docker checkpoint file changed to name or borrow images of the
//! engine (a real engine): a second `manifest.json` in its image tar (the engine would
//! take the last one, tagging the image `victim:latest`), a `./manifest.json`, or a
//! manifest whose image id is that of an image already on the engine (not the one the tar
//! holds) — each refused as a bad bundle, the engine's images untouched, no checkpoint
//! made. The file as exported still imports.

use std::io::{Read, Write};
use std::path::Path;

use agentbox_core::Home;

use crate::common::{code, git, stderr, write, Env};
use crate::docker::{engine, Sweep};
use crate::docker_history::git_image;

type Members = Vec<(String, Vec<u8>)>;

fn project(dir: &Path) {
    write(&dir.join(".gitignore"), "deps/\n");
    write(&dir.join("a.txt"), "one\n");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "first"]);
}

/// The members of tar `data` (files only: name, content), in order.
fn members(data: &[u8]) -> Members {
    let mut tar = tar::Archive::new(data);
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
}

/// `members` as a tar (plain files).
fn tar_of(members: &Members) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        // `append_data` would make `./x` plain: the name goes in the header as is.
        h.as_gnu_mut().expect("gnu").name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, data.as_slice()).expect("append");
    }
    b.into_inner().expect("tar")
}

#[test]
fn an_imported_checkpoint_cannot_name_or_borrow_the_engines_images() {
    let test = "an_imported_checkpoint_cannot_name_or_borrow_the_engines_images";
    let Some(engine) = engine(test) else { return };
    let image = git_image(&engine);
    let a = Env::new();
    let b = Env::new();
    let _sweep_a = Sweep(&engine, Home::at(a.path("home")));
    let _sweep_b = Sweep(&engine, Home::at(b.path("home")));
    let (pa, pb) = (a.path("project"), b.path("project"));
    project(&pa);
    project(&pb);
    let name = format!("ci-{}", std::process::id());
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
        "mkdir -p deps && echo warm > deps/x",
    ]);
    a.ok(&["checkpoint", "create", &name, "--name", "warm"]);
    let file = a.path("warm.ckpt");
    a.ok(&[
        "checkpoint",
        "export",
        "warm",
        "-o",
        &file.to_string_lossy(),
    ]);
    let outer = members(&std::fs::read(&file).expect("read"));
    assert_eq!(outer[1].0, "image.tar");
    let inner = members(&outer[1].1);

    // A tag of an image on the engine, which no import may move.
    let victim = format!("agentbox-victim-{}", std::process::id());
    engine.tag_image(&image, &victim, "latest").expect("tag");
    let victim_tag = format!("{victim}:latest");
    let victim_id = engine
        .image(&victim_tag)
        .expect("inspect")
        .expect("victim")
        .id;
    struct Untag<'a>(&'a agentbox_docker::Engine, String);
    impl Drop for Untag<'_> {
        fn drop(&mut self) {
            let _ = self.0.remove_image(&self.1);
        }
    }
    let _untag = Untag(&engine, victim_tag.clone());

    let (mi, manifest) = inner
        .iter()
        .enumerate()
        .find(|(_, (n, _))| n == "manifest.json")
        .map(|(i, (_, d))| {
            (
                i,
                serde_json::from_slice::<serde_json::Value>(d).expect("json"),
            )
        })
        .expect("manifest.json");
    let mut tagged = manifest.clone();
    tagged[0]["RepoTags"] = serde_json::json!([victim_tag]);
    let tagged = serde_json::to_vec(&tagged).expect("json");

    let bad = b.path("bad.ckpt");
    let bundle = |outer_manifest: &[u8], inner: &Members| {
        let mut f = std::fs::File::create(&bad).expect("create");
        let whole = tar_of(&vec![
            (outer[0].0.clone(), outer_manifest.to_vec()),
            ("image.tar".to_owned(), tar_of(inner)),
        ]);
        f.write_all(&whole).expect("write");
    };
    let refused = |why: &str| {
        let out = b
            .command(&["checkpoint", "import", &bad.to_string_lossy()])
            .current_dir(&pb)
            .output()
            .expect("run agentbox");
        assert_eq!(code(&out), Some(8), "{why}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{why:?} in:\n{}", stderr(&out));
        assert!(!b.ok(&["checkpoint", "ls", "--all"]).contains("warm"));
        let now = engine.image(&victim_tag).expect("inspect").expect("victim");
        assert_eq!(now.id, victim_id, "the engine's tag {victim_tag} was moved");
    };

    // A second manifest.json, and one named `./manifest.json`, after the checked one.
    for second in ["manifest.json", "./manifest.json"] {
        let mut changed = inner.clone();
        changed.push((second.to_owned(), tagged.clone()));
        bundle(&outer[0].1, &changed);
        refused(if second == "manifest.json" {
            "twice"
        } else {
            "not plain"
        });
    }

    // The image id of an image already on the engine, the tar's configuration renamed to
    // it: the configuration's content is not that image.
    let config = manifest[0]["Config"].as_str().expect("config").to_owned();
    let hex = victim_id.strip_prefix("sha256:").expect("id");
    let renamed = match config.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{hex}"),
        None => format!("{hex}.json"),
    };
    let mut borrowed = inner.clone();
    for (n, _) in borrowed.iter_mut() {
        if *n == config {
            *n = renamed.clone();
        }
    }
    let mut m = manifest.clone();
    m[0]["Config"] = serde_json::json!(renamed);
    borrowed[mi].1 = serde_json::to_vec(&m).expect("json");
    let mut outer_m: serde_json::Value = serde_json::from_slice(&outer[0].1).expect("json");
    outer_m["held"]["image_id"] = serde_json::json!(victim_id);
    bundle(&serde_json::to_vec(&outer_m).expect("json"), &borrowed);
    refused("configuration is sha256:");

    // The file as exported imports, its image loaded from the rewritten tar.
    let imported: serde_json::Value = serde_json::from_str(&b.run_in(
        &pb,
        &["--json", "checkpoint", "import", &file.to_string_lossy()],
    ))
    .expect("JSON");
    assert_eq!(imported["name"], "warm", "{imported}");
    let warm = format!("{name}-b");
    b.run_in(&pb, &["create", "--checkpoint", "warm", &warm]);
    assert_eq!(b.ok(&["exec", &warm, "--", "cat", "deps/x"]), "warm\n");
    assert_eq!(
        engine
            .image(&victim_tag)
            .expect("inspect")
            .expect("victim")
            .id,
        victim_id
    );
    b.ok(&["destroy", &warm]);
    b.run_in(&pb, &["checkpoint", "rm", "warm"]);
    a.ok(&["checkpoint", "rm", "warm"]);
    a.ok(&["destroy", &name]);
    for env in [&a, &b] {
        env.ok(&["gc"]);
        env.ok(&["prune", "--min-age", "0"]);
    }
}
