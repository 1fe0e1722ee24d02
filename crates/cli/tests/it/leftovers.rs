//! Finding and removing what an interrupted operation left in the store: `fsck` reports a
//! half-made layer and `prune` removes it, gives back an interrupted commit's files, and
//! removes an import's staging killed half-way.

use std::path::{Path, PathBuf};

use crate::bundles::import_args;
use crate::common::{code, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// Set up a versioned directory with one commit; returns it.
fn prepared(t: &Env) -> PathBuf {
    let dir = t.path("work");
    write(&dir.join("a"), "root");
    t.ok(&["env", dir.to_str().expect("utf8")]);
    write(&dir.join("a"), &"one".repeat(10_000));
    t.ok(&["commit", "work", "-m", "one"]);
    dir
}

/// The report of a command that failed after printing it (the error follows it in JSON).
fn first_json(stdout: &[u8]) -> serde_json::Value {
    serde_json::Deserializer::from_slice(stdout)
        .into_iter::<serde_json::Value>()
        .next()
        .expect("a JSON value")
        .expect("valid JSON")
}

fn rows_of(v: &serde_json::Value, kind: &str) -> Vec<serde_json::Value> {
    v.as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["kind"] == kind)
        .cloned()
        .collect()
}

#[test]
fn fsck_reports_and_prune_removes_a_half_made_layer() {
    if !require_root("fsck_reports_and_prune_removes_a_half_made_layer") {
        return;
    }
    for (point, kind) in [
        ("commit:after-copy", "temp-layer"),
        ("commit:after-layer", "unrecorded-layer"),
    ] {
        let t = Env::new();
        let dir = prepared(&t);
        write(&dir.join("big"), &"x".repeat(200_000));
        // A process working in the tree: the commit copies the changes into a layer of its
        // own (an idle tree's commit hands its files over instead, see below).
        let mut holder = std::process::Command::new("sleep")
            .arg("60")
            .current_dir(&dir)
            .spawn()
            .expect("spawn sleep");
        let out = t.run_with(
            &["commit", "work", "-m", "interrupted"],
            &[("AGENTBOX_FAILPOINT", point)],
        );
        let _ = holder.kill();
        let _ = holder.wait();
        assert!(out.status.code().is_none(), "{point}: {}", stderr(&out));

        // fsck reports the half-made layer, with its path and size, as a problem.
        let out = t.run(&["--json", "fsck"]);
        assert_eq!(code(&out), Some(7), "{point}: {}", stderr(&out));
        let report = first_json(&out.stdout);
        assert_eq!(report["leftovers_checked"], true, "{point}");
        let problems = report["problems"].as_array().expect("problems");
        let layers = t.path("home/store/layers");
        let half: Vec<&serde_json::Value> = problems
            .iter()
            .filter(|p| {
                Path::new(p["path"].as_str().unwrap_or("")).parent() == Some(layers.as_path())
            })
            .collect();
        assert_eq!(half.len(), 1, "{point}: {report}");
        let path = PathBuf::from(half[0]["path"].as_str().expect("path"));
        assert!(path.is_dir(), "{point}");
        assert!(
            half[0]["bytes"].as_u64().expect("bytes") >= 200_000,
            "{point}: {report}"
        );
        assert_eq!(half[0]["repairable"], true);
        let human = t.run(&["fsck"]);
        let text = String::from_utf8_lossy(&human.stdout);
        assert!(
            text.contains(&format!("problem: {}: half-made layer", path.display()))
                && text.contains("`agentbox prune` removes it"),
            "{point}: {text}"
        );

        // A dry run lists it and keeps it.
        let dry = t.json(&["prune", "--dry-run"]);
        let rows = rows_of(&dry, kind);
        assert_eq!(rows.len(), 1, "{point}: {dry}");
        assert_eq!(rows[0]["outcome"], "would remove");
        assert_eq!(rows[0]["target"], path.display().to_string());
        assert!(path.exists(), "{point}: the dry run removed it");

        // prune removes it and says how much it freed.
        let human = t.ok(&["prune"]);
        assert!(human.contains("freed "), "{point}: {human}");
        assert!(!path.exists(), "{point}: still there");
        t.ok(&["fsck"]);
        assert_eq!(t.json(&["prune", "--dry-run"]), serde_json::json!([]));
        // The acknowledged history is intact and the directory still commits.
        assert_eq!(
            t.json(&["log", "work"])["nodes"].as_array().map(Vec::len),
            Some(2),
            "{point}"
        );
        t.ok(&["mount", "work"]);
        t.ok(&["commit", "work", "-m", "after"]);
        let _ = std::process::Command::new("umount").arg(&dir).status();
    }
}

/// A commit of an idle tree renames its working files to be the new layer; killed before
/// its commit point, that "half-made layer" is the user's work: fsck says so and prune
/// gives it back instead of removing it.
#[test]
fn prune_gives_back_the_files_of_an_interrupted_commit() {
    if !require_root("prune_gives_back_the_files_of_an_interrupted_commit") {
        return;
    }
    for point in ["commit:after-handover", "commit:after-record"] {
        let t = Env::new();
        let dir = prepared(&t);
        write(&dir.join("big"), &"x".repeat(200_000));
        let out = t.run_with(
            &["commit", "work", "-m", "interrupted"],
            &[("AGENTBOX_FAILPOINT", point)],
        );
        assert!(out.status.code().is_none(), "{point}: {}", stderr(&out));
        let out = t.run(&["--json", "fsck"]);
        assert_eq!(code(&out), Some(7), "{point}: {}", stderr(&out));
        let report = first_json(&out.stdout);
        let problems = report["problems"].as_array().expect("problems");
        assert_eq!(problems.len(), 1, "{point}: {report}");
        assert!(
            problems[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("holding its working files")),
            "{point}: {report}"
        );
        assert_eq!(report["unreferenced_layers"], 0, "{point}: {report}");
        let dry = t.json(&["prune", "--dry-run"]);
        let rows = rows_of(&dry, "interrupted-commit");
        assert_eq!(rows.len(), 1, "{point}: {dry}");
        assert_eq!(rows[0]["outcome"], "would give back", "{point}");
        let pruned = t.json(&["prune"]);
        assert_eq!(
            rows_of(&pruned, "interrupted-commit")[0]["outcome"],
            "given back",
            "{point}: {pruned}"
        );
        t.ok(&["fsck"]);
        t.ok(&["mount", "work"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("big")).expect(point).len(),
            200_000,
            "{point}: the working file is back"
        );
        t.ok(&["commit", "work", "-m", "after"]);
        let _ = std::process::Command::new("umount").arg(&dir).status();
    }
}

#[test]
fn prune_removes_the_staging_of_an_import_killed_half_way() {
    if !require_root("prune_removes_the_staging_of_an_import_killed_half_way") {
        return;
    }
    let t = Env::new();
    let dir = prepared(&t);
    let bundle = t.path("work.bundle");
    t.ok(&["export", "work", "-o", bundle.to_str().expect("utf8")]);
    let t2 = Env::new();
    let target = t2.path("imported");
    let out = t2.run_with(
        &import_args(
            bundle.to_str().expect("utf8"),
            target.to_str().expect("utf8"),
            &[],
        ),
        &[("AGENTBOX_FAILPOINT", "import:after-stage")],
    );
    assert!(out.status.code().is_none(), "{}", stderr(&out));
    let out = t2.run(&["--json", "fsck"]);
    assert_eq!(code(&out), Some(7), "{}", stderr(&out));
    let report = first_json(&out.stdout);
    let tmp = t2.path("home/store/tmp");
    assert!(
        report["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| {
                Path::new(p["path"].as_str().unwrap_or("")).parent() == Some(tmp.as_path())
                    && p["bytes"].as_u64().is_some_and(|b| b > 0)
            }),
        "{report}"
    );
    let done = t2.json(&["prune"]);
    let rows = rows_of(&done, "staging");
    assert_eq!(rows.len(), 1, "{done}");
    assert_eq!(rows[0]["outcome"], "removed");
    assert!(rows[0]["bytes"].as_u64().is_some_and(|b| b > 0), "{done}");
    assert_eq!(std::fs::read_dir(&tmp).expect("tmp").count(), 0);
    t2.ok(&["fsck"]);
    let _ = std::process::Command::new("umount").arg(&dir).status();
}
