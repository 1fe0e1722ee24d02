//! A checkpoint's box re-seeded from a delta, against local seeding.

use std::path::Path;

use super::*;

#[test]
fn a_checkpoint_s_box_takes_a_delta() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 6);
    // The checkpoint: a shallow box shipped at the host's first state, with a warm,
    // ignored artifact and a commit of its own.
    let first_stage = d.path().join("stage1");
    let mut o = opts(&first_stage, Depth::Fixed(2));
    o.branch = "agentbox/cp".into();
    let first = ship(&repo, "cp", &o).expect("ship");
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    exec(&first.steps(ws));
    write(&boxdir, "ignored/warm", "artifact\n");
    run(&boxdir, &["commit", "-q", "-am", "the box's own"]);
    let from_tip = first.seeded.base.clone();

    // The host moves on: its work committed, two more commits, new carried work.
    run(&host, &["add", "-A", "a.txt", "new.txt", "del.txt"]);
    run(&host, &["commit", "-q", "-m", "landed"]);
    write(&host, "later.txt", "later\n");
    write(&host, "del.txt", "back\n");
    run(&host, &["add", "later.txt", "del.txt"]);
    run(&host, &["commit", "-q", "-m", "later"]);
    carry(&host, "2");
    write(&host, "u.txt", "untracked, changed\n");

    let stage = d.path().join("stage2");
    let o = opts(&stage, Depth::Adaptive);
    // Unknown to the host, or not an ancestor: no delta, nothing made.
    assert!(ship_delta(&repo, "b", &"1".repeat(40), &o)
        .expect("unknown")
        .is_none());
    let side = run(&boxdir, &["rev-parse", "HEAD"]).trim().to_owned();
    assert!(ship_delta(&repo, "b", &side, &o).expect("box's").is_none());
    run(&host, &["branch", "side", &format!("{from_tip}~1")]);
    run(
        &host,
        &["commit-tree", "-m", "x", &format!("{from_tip}^{{tree}}")],
    );
    let diverged = run(
        &host,
        &["commit-tree", "-p", "side", "-m", "diverged", "side^{tree}"],
    )
    .trim()
    .to_owned();
    assert!(ship_delta(&repo, "b", &diverged, &o)
        .expect("diverged")
        .is_none());
    assert!(!stage.exists());

    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let before = host_refs(&host);
    let delta = ship_delta(&repo, "b", &from_tip, &o)
        .expect("delta")
        .expect("from_tip serves");
    assert_eq!(delta.seeded, seeded);
    assert_eq!(
        delta.form,
        Form::Delta {
            from_tip: from_tip.clone(),
            bundle: true
        }
    );
    assert!(!host_refs(&host).contains("refs/agentbox-ship/"));
    assert_ne!(host_refs(&host), before, "pinned");
    let skipped = exec(&delta.steps(ws));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(tree(&boxdir, &["ignored"]), tree(&local, &[]));
    assert_eq!(
        fs_err::read_to_string(boxdir.join("ignored/warm")).expect("kept"),
        "artifact\n"
    );
    let (mut got, want) = (facts(&boxdir), facts(&local));
    // The checkpoint's repository still has its own branch's upstream: left out.
    let config = got.pop().expect("config");
    let config: String = config
        .lines()
        .filter(|l| !l.starts_with("branch.agentbox/cp."))
        .map(|l| format!("{l}\n"))
        .collect();
    got.push(config);
    assert_eq!(got, want);
    assert!(!boxdir.join(DELTA_BUNDLE).exists());
}

#[test]
fn a_delta_whose_carried_work_collides_is_reported() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 3);
    let mut o = opts(&d.path().join("stage1"), Depth::Fixed(5));
    o.seed.no_carry = true;
    o.branch = "agentbox/cp".into();
    let first = ship(&repo, "cp", &o).expect("ship");
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    exec(&first.steps(ws));
    // The box has a file of its own where the host's carried work adds one, and one where
    // the host has an untracked file.
    write(&boxdir, "new.txt", "the box's\n");
    write(&boxdir, "u.txt", "the box's untracked\n");

    let o = opts(&d.path().join("stage2"), Depth::Adaptive);
    let mut delta = ship_delta(&repo, "b", &first.seeded.base, &o)
        .expect("delta")
        .expect("from_tip serves");
    assert_eq!(
        delta.form,
        Form::Delta {
            from_tip: first.seeded.base.clone(),
            bundle: true
        }
    );
    // The provider finds which of the host's untracked files the box has: left out.
    let present: std::collections::BTreeSet<String> = delta
        .files
        .iter()
        .filter(|f| fs_err::symlink_metadata(boxdir.join(f)).is_ok())
        .cloned()
        .collect();
    let before = delta.files_tar_bytes;
    // (The checkpoint's box got the secrets too.)
    assert_eq!(
        delta.leave_out(&present).expect("left out"),
        ["u.txt", ".env", "dir/.env"]
    );
    assert!(delta.files_tar_bytes < before);
    assert_eq!(delta.files, ["newdir/u2.txt", "ulink"]);
    let skipped = exec(&delta.steps(ws));
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(
        fs_err::read_to_string(boxdir.join("u.txt")).expect("kept"),
        "the box's untracked\n"
    );
    assert_eq!(
        fs_err::read_to_string(boxdir.join("newdir/u2.txt")).expect("arrived"),
        "untracked below\n"
    );
    assert_eq!(
        fs_err::read_link(boxdir.join("ulink")).expect("a link"),
        Path::new("dir")
    );
    assert_eq!(skipped[0].what, "the host's uncommitted changes");
    assert!(skipped[0].error.contains("new.txt"), "{}", skipped[0].error);
    assert_eq!(
        fs_err::read_to_string(boxdir.join("new.txt")).expect("kept"),
        "the box's\n"
    );
    assert_eq!(
        run(&boxdir, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/agentbox/b"
    );
    assert_eq!(
        run(&boxdir, &["rev-parse", "HEAD"]).trim(),
        first.seeded.base
    );
    // Undone (as after a box that could not take its delta): the host is as before, and
    // the box can be shipped in full.
    let before = host_refs(&host);
    // Not while the branch holds more than the base.
    let tip = run(
        &host,
        &[
            "commit-tree",
            "-p",
            &first.seeded.base,
            "-m",
            "box work",
            &format!("{}^{{tree}}", first.seeded.base),
        ],
    );
    run(&host, &["update-ref", "refs/heads/agentbox/b", tip.trim()]);
    assert!(delta.undo(&repo).is_err());
    assert!(host_refs(&host).contains("refs/agentbox/b/base"));
    run(
        &host,
        &["update-ref", "refs/heads/agentbox/b", &first.seeded.base],
    );
    delta.undo(&repo).expect("undo");
    let after = host_refs(&host);
    assert!(!after.contains("refs/agentbox/b/"), "{after}");
    assert!(!after.contains("refs/heads/agentbox/b "), "{after}");
    assert_ne!(before, after);
    let full = ship(&repo, "b", &opts(&d.path().join("stage3"), Depth::Adaptive)).expect("ship");
    assert_eq!(full.seeded.base, first.seeded.base);
}

#[test]
fn a_delta_with_nothing_new_only_moves_the_branch() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 3);
    let mut o = opts(&d.path().join("stage1"), Depth::Fixed(1));
    o.seed.no_carry = true;
    o.seed.with_env.clear();
    o.branch = "agentbox/cp".into();
    let first = ship(&repo, "cp", &o).expect("ship");
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    exec(&first.steps(ws));
    write(&boxdir, "a.txt", "the checkpoint's change\n");

    let mut o = opts(&d.path().join("stage2"), Depth::Adaptive);
    o.seed.no_carry = true;
    o.seed.with_env.clear();
    let delta = ship_delta(&repo, "b", &first.seeded.base, &o)
        .expect("delta")
        .expect("from_tip serves");
    assert_eq!(
        delta.form,
        Form::Delta {
            from_tip: first.seeded.base.clone(),
            bundle: false
        }
    );
    assert_eq!(delta.seeded.untracked, 0);
    let steps = delta.steps(ws);
    assert!(
        !steps
            .iter()
            .any(|s| matches!(s, BoxStep::Extract { .. } | BoxStep::Remove { .. })),
        "{steps:?}"
    );
    assert!(exec(&steps).is_empty());
    assert_eq!(
        run(&boxdir, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/agentbox/b"
    );
    assert_eq!(run(&boxdir, &["status", "--porcelain"]), "");
    assert_eq!(
        run(&boxdir, &["config", "agentbox.branch"]).trim(),
        "agentbox/b"
    );
    let refs = host_refs(&host);
    assert!(refs.contains("refs/agentbox/b/base"), "{refs}");
    assert!(!refs.contains("refs/agentbox/b/carried"), "{refs}");
}
