//! `prune --all` and Docker checkpoint images (a real engine): a checkpoint image whose
//! manifest is gone, and a checkpoint tag nothing names, which a plain `prune` would keep
//! while a node names their image, go with `prune --all`, which says which (human and
//! `--json`); the tags a manifest or a box names stay.

use agentbox_core::Home;

use crate::common::{code, git, stderr, write, Env};
use crate::docker::{engine, on_engine, Sweep};
use crate::docker_history::git_image;

#[test]
fn prune_all_removes_the_checkpoint_images_nothing_names() {
    let test = "prune_all_removes_the_checkpoint_images_nothing_names";
    let Some(engine) = engine(test) else { return };
    let image = git_image(&engine);
    let env = Env::new();
    let home = Home::at(env.path("home"));
    let _sweep = Sweep(&engine, home.clone());
    let project = env.path("project");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let name = format!("pa-{}", std::process::id());
    env.run_in(
        &project,
        &["create", "--provider", "docker", "--image", &image, &name],
    );
    env.ok(&["exec", &name, "--", "sh", "-c", "echo warm > w.txt"]);
    let tag_of = |c: &serde_json::Value| c["held"]["image"].as_str().expect("image").to_owned();
    let kept = tag_of(&env.json(&["checkpoint", "create", &name, "--name", "kept"]));
    let lost = tag_of(&env.json(&["checkpoint", "create", &name, "--name", "lost"]));
    // A box made from a checkpoint whose manifest then goes names it still.
    let used = tag_of(&env.json(&["checkpoint", "create", &name, "--name", "used"]));
    let from_used = format!("{name}-u");
    env.run_in(&project, &["create", "--checkpoint", "used", &from_used]);
    // A tag someone added to a checkpoint image, and two manifests lost.
    let (repo, _) = kept.rsplit_once(':').expect("repo:tag");
    let stray = format!("{repo}:stray");
    engine
        .tag_image(&lost, repo, "stray")
        .expect("tag the image again");
    let manifests = env.path("home/projects");
    let mut removed = 0;
    for dir in std::fs::read_dir(&manifests).expect("projects").flatten() {
        for lost_name in ["lost.json", "used.json"] {
            let m = dir.path().join("checkpoints").join(lost_name);
            if m.exists() {
                std::fs::remove_file(&m).expect("remove the manifest");
                removed += 1;
            }
        }
    }
    assert_eq!(removed, 2, "the manifests of lost and used");

    // A plain prune would keep them: a node of the store still names their image.
    let plain = env.json(&["prune", "--min-age", "0", "--dry-run"]);
    assert!(
        plain
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["kind"] != "image" && r["kind"] != "checkpoint-image"),
        "{plain}"
    );

    // --all, dry run: lists the two tags nothing names, removes nothing.
    let dry = env.json(&["prune", "--all", "--min-age", "0", "--dry-run"]);
    let rows: Vec<&serde_json::Value> = dry
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["kind"] == "checkpoint-image")
        .collect();
    let mut targets: Vec<&str> = rows.iter().filter_map(|r| r["target"].as_str()).collect();
    targets.sort();
    let mut want = vec![lost.as_str(), stray.as_str()];
    want.sort();
    assert_eq!(targets, want, "{dry}");
    assert!(rows.iter().all(|r| r["outcome"] == "would remove"), "{dry}");
    assert!(engine.image(&lost).expect("inspect").is_some());

    // --all: removes them and says so.
    let out = env.run(&["prune", "--all", "--min-age", "0"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let human = String::from_utf8_lossy(&out.stdout);
    for t in [&lost, &stray] {
        assert!(
            human.contains(&format!(
                "checkpoint image {t}, which no checkpoint or box names"
            )),
            "{human}"
        );
    }
    for t in [&lost, &stray] {
        assert!(engine.image(t).expect("inspect").is_none(), "{t} is gone");
    }
    for t in [&kept, &used] {
        assert!(engine.image(t).expect("inspect").is_some(), "{t} stays");
    }
    assert_eq!(
        env.ok(&["exec", &from_used, "--", "cat", "w.txt"]),
        "warm\n",
        "the box made from a checkpoint is untouched"
    );
    let again = env.json(&["prune", "--all", "--min-age", "0", "--dry-run"]);
    assert!(
        !again.to_string().contains("checkpoint-image"),
        "nothing more: {again}"
    );

    // Once the box made from it goes, `used` is named by nothing.
    env.ok(&["destroy", &from_used]);
    env.ok(&["prune", "--all", "--min-age", "0"]);
    assert!(engine.image(&used).expect("inspect").is_none());
    env.ok(&["checkpoint", "rm", "kept"]);
    env.ok(&["destroy", &name]);
    env.ok(&["gc"]);
    env.ok(&["prune", "--all", "--min-age", "0"]);
    assert_eq!(on_engine(&engine, &home), (0, 0));
}
