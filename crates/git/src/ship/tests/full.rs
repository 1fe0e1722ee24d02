//! A full shipment against local seeding, and what a failed one leaves.

use super::*;

#[test]
fn a_shipped_box_is_what_local_seeding_makes() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 8);
    let stage = d.path().join("stage");
    let o = opts(&stage, Depth::Fixed(3));
    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let host_status = run(&host, &["status", "--porcelain=v1", "-z"]);

    let shipped = ship(&repo, "b", &o).expect("ship");
    assert_eq!(shipped.seeded, seeded);
    assert!(shipped.stash.is_some());
    assert_eq!(shipped.form, Form::Full { depth: Some(3) });
    // u.txt, newdir/u2.txt, ulink, .env, dir/.env; not sub's.
    assert_eq!(shipped.seeded.untracked, 5);
    let mut staged: Vec<_> = fs_err::read_dir(&stage)
        .expect("stage")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    staged.sort();
    assert_eq!(staged, ["files.tar", "git.tar"]);
    // The host: the box's pins and branch, no temporary ref, its own state untouched.
    let refs = host_refs(&host);
    assert!(!refs.contains("refs/agentbox-ship/"), "{refs}");
    assert!(refs.contains("refs/agentbox/b/base"), "{refs}");
    assert!(refs.contains("refs/agentbox/b/carried"), "{refs}");
    assert!(refs.contains("refs/heads/agentbox/b "), "{refs}");
    assert_eq!(run(&host, &["status", "--porcelain=v1", "-z"]), host_status);

    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    let skipped = exec(&shipped.steps(ws));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(tree(&boxdir, &[]), tree(&local, &[]));
    assert_eq!(facts(&boxdir), facts(&local));
    // Shallow as asked, nothing of the host's path or hooks, nothing of the stage's refs.
    assert_eq!(run(&boxdir, &["rev-list", "--count", "HEAD"]).trim(), "3");
    assert!(boxdir.join(".git/shallow").exists());
    assert!(!boxdir.join(".git/hooks").exists());
    let config = fs_err::read_to_string(boxdir.join(".git/config")).expect("config");
    assert!(!config.contains(host.to_str().expect("utf-8")), "{config}");
    assert!(!config.contains("file:"), "{config}");
    assert_eq!(
        run(&boxdir, &["for-each-ref", "--format=%(refname)"]).trim(),
        "refs/heads/agentbox/b"
    );
    let tree_of = |dir: &Path| run(dir, &["write-tree"]);
    assert_eq!(tree_of(&boxdir), tree_of(&local));
}

#[test]
fn a_shipment_without_carry_and_with_full_history() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 5);
    let stage = d.path().join("stage");
    let mut o = opts(&stage, Depth::Full);
    o.seed.from_ref = Some("HEAD~1".into());
    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let shipped = ship(&repo, "b", &o).expect("ship");
    assert_eq!(shipped.seeded, seeded);
    assert_eq!(shipped.stash, None);
    assert_eq!(shipped.form, Form::Full { depth: None });
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    exec(&shipped.steps(boxdir.to_str().expect("utf-8")));
    assert_eq!(tree(&boxdir, &[]), tree(&local, &[]));
    assert_eq!(facts(&boxdir), facts(&local));
    assert_eq!(run(&boxdir, &["rev-list", "--count", "HEAD"]).trim(), "4");
    assert!(!boxdir.join(".git/shallow").exists());
}

#[test]
fn a_failed_shipment_leaves_nothing() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 4);
    let before = host_refs(&host);
    let stage = d.path().join("stage");

    // A ref that does not exist.
    let mut o = opts(&stage, Depth::Adaptive);
    o.seed.from_ref = Some("no-such-branch".into());
    match ship(&repo, "b", &o) {
        Err(GitError::NoSuchRef { repo: r, start }) => {
            assert_eq!(r, repo.root);
            assert_eq!(start, "no-such-branch");
        }
        other => panic!("{other:?}"),
    }
    assert!(!stage.exists());
    assert_eq!(host_refs(&host), before);

    // An object of the history the host cannot read: the fetch into the stage fails.
    let first = run(&host, &["rev-parse", "HEAD~2:history.txt"])
        .trim()
        .to_owned();
    let loose = repo.objects.join(&first[..2]).join(&first[2..]);
    fs_err::remove_file(&loose).expect("the loose object");
    match ship(&repo, "b", &opts(&stage, Depth::Full)) {
        Err(GitError::Ship {
            repo: r,
            box_name,
            what,
            ..
        }) => {
            assert_eq!(r, repo.root);
            assert_eq!(box_name, "b");
            assert_eq!(what, "fetch into the stage");
        }
        other => panic!("{other:?}"),
    }
    assert!(!stage.exists());
    assert_eq!(host_refs(&host), before);

    // What a killed shipment leaves, cleared.
    let head = run(&host, &["rev-parse", "HEAD"]);
    run(
        &host,
        &["update-ref", "refs/agentbox-ship/b/base", head.trim()],
    );
    run(
        &host,
        &["update-ref", "refs/agentbox-ship/c/base", head.trim()],
    );
    drop_ship_refs(&host, "b").expect("drop");
    let refs = host_refs(&host);
    assert!(!refs.contains("refs/agentbox-ship/b/"), "{refs}");
    assert!(refs.contains("refs/agentbox-ship/c/"), "{refs}");
    drop_ship_refs(&host, "c").expect("drop");
    assert_eq!(host_refs(&host), before);

    // The box's branch exists already: refused at the end, everything made undone.
    run(&host, &["branch", "agentbox/b"]);
    let before = host_refs(&host);
    match ship(&repo, "b", &opts(&stage, Depth::Fixed(1))) {
        Err(GitError::Ship { what, .. }) => assert_eq!(what, "pin the base"),
        other => panic!("{other:?}"),
    }
    assert!(!stage.exists());
    assert_eq!(host_refs(&host), before);
}

#[test]
fn a_linked_worktree_ships_like_its_seed() {
    let d = tempfile::tempdir().expect("tempdir");
    let main = d.path().join("main");
    fs_err::create_dir(&main).expect("mkdir");
    fixture(&main, 3);
    let linked = d.path().join("linked");
    run(
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            linked.to_str().expect("utf-8"),
        ],
    );
    write(&linked, "a.txt", "linked work\n");
    write(&linked, "lu.txt", "linked untracked\n");
    let repo = crate::detect(&linked)
        .expect("detect")
        .expect("a repository");
    assert_ne!(repo.git_dir(), linked.join(".git"));
    let o = opts(&d.path().join("stage"), Depth::Adaptive);
    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let shipped = ship(&repo, "b", &o).expect("ship");
    assert_eq!(shipped.seeded, seeded);
    assert_eq!(shipped.seeded.source_branch.as_deref(), Some("feature"));
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    assert!(exec(&shipped.steps(boxdir.to_str().expect("utf-8"))).is_empty());
    assert_eq!(tree(&boxdir, &[]), tree(&local, &[]));
    assert_eq!(facts(&boxdir), facts(&local));
    assert!(!host_refs(&main).contains("refs/agentbox-ship/"));
}
