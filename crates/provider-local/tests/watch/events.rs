//! What a watcher reports: every kind of change, nothing for ignored paths, directories made
//! or moved after it started, a full queue, a tree changing while it is set up, a missing or
//! removed root.

use super::*;

#[test]
fn every_kind_of_change_is_seen() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("src/a.txt"), "a\n");
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.root(), root);
    assert_eq!(w.watch_count(), 2);
    assert_eq!(drain(&mut w), Seen::default(), "nothing happened yet");

    let ops: Vec<Op<'_>> = vec![
        ("create", Box::new(|| write(&root.join("src/b.txt"), "b"))),
        (
            "append",
            Box::new(|| append(&root.join("src/a.txt"), "more")),
        ),
        (
            "chmod",
            Box::new(|| {
                fs_err::set_permissions(
                    root.join("src/a.txt"),
                    std::fs::Permissions::from_mode(0o600),
                )
                .expect("chmod")
            }),
        ),
        (
            "rename",
            Box::new(|| {
                fs_err::rename(root.join("src/b.txt"), root.join("src/c.txt")).expect("rename")
            }),
        ),
        (
            "symlink",
            Box::new(|| {
                std::os::unix::fs::symlink("a.txt", root.join("src/link")).expect("symlink")
            }),
        ),
        (
            "delete",
            Box::new(|| fs_err::remove_file(root.join("src/c.txt")).expect("rm")),
        ),
        (
            "chmod root",
            Box::new(|| {
                fs_err::set_permissions(root, std::fs::Permissions::from_mode(0o750))
                    .expect("chmod")
            }),
        ),
        (
            "rmdir",
            Box::new(|| {
                fs_err::create_dir(root.join("gone")).expect("mkdir");
                fs_err::remove_dir(root.join("gone")).expect("rmdir")
            }),
        ),
    ];
    for (name, op) in ops {
        op();
        let seen = changes_after(&mut w);
        assert!(seen.changed > 0, "{name}: no change seen");
        assert!(!seen.overflowed, "{name}");
    }
    assert_eq!(w.watch_count(), 2, "the removed directory lost its watch");
}

#[test]
fn ignored_paths_produce_no_changes() {
    let t = tempdir();
    let root = t.path();
    for dir in [
        "tmp",
        "var/log",
        "home/dev/.cache",
        "work/node_modules/.cache",
        "src",
    ] {
        fs_err::create_dir_all(root.join(dir)).expect("mkdir");
    }
    let mut ignore = IgnoreSet::default_patterns();
    ignore.push("*.log".to_owned());
    let mut w = Watcher::new(root, IgnoreSet::new(&ignore)).expect("watch");
    // root, var, home, home/dev, work, work/node_modules, src: the ignored ones are unwatched.
    assert_eq!(w.watch_count(), 7);

    write(&root.join("tmp/x"), "x");
    fs_err::create_dir_all(root.join("tmp/a/b/c")).expect("mkdir");
    write(&root.join("tmp/a/b/c/f"), "f");
    append(&root.join("tmp/x"), "more");
    write(&root.join("var/log/syslog"), "log line");
    write(&root.join("home/dev/.cache/pip/wheel"), "w");
    write(&root.join("work/node_modules/.cache/babel/1.json"), "{}");
    write(&root.join("src/build.log"), "log");
    append(&root.join("src/build.log"), "more log");
    write(&root.join("src/pkg/__pycache__/m.cpython-312.pyc"), "pyc");
    write(&root.join("src/.pytest_cache/v/cache/lastfailed"), "{}");
    fs_err::rename(root.join("tmp/x"), root.join("tmp/y")).expect("rename");
    fs_err::remove_file(root.join("tmp/y")).expect("rm");

    let seen = drain(&mut w);
    // `src/pkg` is not ignored: its creation is the only change.
    assert_eq!(seen.changed, 1, "only src/pkg: {seen:?}");
    assert_eq!(w.watch_count(), 8, "src/pkg watched, its __pycache__ not");
    write(&root.join("src/pkg/__pycache__/n.pyc"), "pyc");
    assert_eq!(drain(&mut w), Seen::default());

    write(&root.join("src/main.rs"), "fn main() {}");
    assert!(
        changes_after(&mut w).changed > 0,
        "a real change still counts"
    );
}

#[test]
fn directories_created_after_start_are_watched() {
    let t = tempdir();
    let root = t.path();
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.watch_count(), 1);

    fs_err::create_dir_all(root.join("a/b/c/d")).expect("mkdir -p");
    write(&root.join("a/b/c/d/f"), "f");
    let seen = changes_after(&mut w);
    // a, b, c, d and f, each counted at least once (by event or by the new directory's walk).
    assert!(seen.changed >= 5, "{seen:?}");
    assert_eq!(w.watch_count(), 5);

    // The deepest directory has its own watch now.
    append(&root.join("a/b/c/d/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("a/b/c/d/e/g"), "g");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(w.watch_count(), 6);
    append(&root.join("a/b/c/d/e/g"), "more");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn moved_directories_are_watched_under_their_new_path() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("proj/sub/f"), "f");
    fs_err::create_dir_all(root.join("tmp")).expect("mkdir");
    let mut w = Watcher::new(root, patterns(&["tmp", "moved/skip"])).expect("watch");
    assert_eq!(w.watch_count(), 3);

    // Inside the tree: the subtree keeps being watched, under the new path.
    fs_err::create_dir(root.join("proj/skip")).expect("mkdir");
    fs_err::rename(root.join("proj"), root.join("moved")).expect("rename");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(
        w.watch_count(),
        3,
        "moved, moved/sub; moved/skip is ignored now"
    );
    append(&root.join("moved/sub/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("moved/skip/x"), "x");
    assert_eq!(
        drain(&mut w),
        Seen::default(),
        "the new path decides what is ignored"
    );

    // Into an ignored directory: its watches go.
    fs_err::rename(root.join("moved"), root.join("tmp/moved")).expect("rename");
    assert!(changes_after(&mut w).changed > 0, "the directory left");
    assert_eq!(w.watch_count(), 1);
    append(&root.join("tmp/moved/sub/f"), "more");
    assert_eq!(drain(&mut w), Seen::default());

    // Out of the tree entirely, then back in.
    let outside = tempdir();
    write(&root.join("d/e/f"), "f");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(w.watch_count(), 3);
    fs_err::rename(root.join("d"), outside.path().join("d")).expect("rename");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(w.watch_count(), 1);
    append(&outside.path().join("d/e/f"), "more");
    assert_eq!(drain(&mut w), Seen::default(), "changes outside the tree");
    fs_err::rename(outside.path().join("d"), root.join("back")).expect("rename");
    let seen = changes_after(&mut w);
    assert!(seen.changed >= 3, "back, back/e, back/e/f: {seen:?}");
    assert_eq!(w.watch_count(), 3);
    append(&root.join("back/e/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn queue_overflow_is_reported_and_watches_still_work() {
    let t = tempdir();
    let root = t.path();
    fs_err::create_dir(root.join("many")).expect("mkdir");
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    let limit: usize = fs_err::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .map(|s| s.trim().parse().expect("a number"))
        .unwrap_or(16384);

    // Writes alternating between two files: each raises a MODIFY that the kernel cannot
    // merge with the previous event (which names the other file). None is read until the
    // queue overflowed.
    write(&root.join("many/a"), "a");
    write(&root.join("many/b"), "b");
    let open = |name: &str| {
        fs_err::OpenOptions::new()
            .append(true)
            .open(root.join("many").join(name))
            .expect("open")
    };
    let mut files = [open("a"), open("b")];
    for i in 0..limit + 1000 {
        files[i % 2].write_all(b"x").expect("write");
    }
    // A directory made after the overflow is only found by the rescan.
    write(&root.join("late/f"), "f");
    let seen = changes_after(&mut w);
    assert!(seen.overflowed, "{seen:?}");
    assert!(seen.changed > 0);
    assert_eq!(w.watch_count(), 3, "root, many, late");

    append(&root.join("late/f"), "more");
    let seen = changes_after(&mut w);
    assert!(seen.changed > 0 && !seen.overflowed, "{seen:?}");
    write(&root.join("many/new"), "x");
    assert!(changes_after(&mut w).changed > 0);
    fs_err::create_dir_all(root.join("later/x")).expect("mkdir");
    write(&root.join("later/x/y"), "y");
    assert!(changes_after(&mut w).changed > 0);
    append(&root.join("later/x/y"), "more");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn five_thousand_directories_are_watched() {
    let t = tempdir();
    let root = t.path();
    for i in 0..50 {
        for j in 0..100 {
            fs_err::create_dir_all(root.join(format!("d{i}/e{j}"))).expect("mkdir");
        }
    }
    write(&root.join("d49/e99/f"), "f");
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.watch_count(), 1 + 50 + 5000);
    append(&root.join("d49/e99/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("d0/e0/new"), "n");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn setup_tolerates_a_tree_changing_meanwhile() {
    let t = tempdir();
    let root = t.path().to_owned();
    for i in 0..200 {
        fs_err::create_dir_all(root.join(format!("d{i}/x/y"))).expect("mkdir");
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let churn = s.spawn(|| {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 3 {
                for i in 0..200 {
                    let _ = fs_err::remove_dir_all(root.join(format!("d{i}")));
                    let _ = fs_err::create_dir_all(root.join(format!("d{i}/x/y")));
                }
                rounds += 1;
            }
        });
        for _ in 0..5 {
            let mut w = Watcher::new(&root, IgnoreSet::none()).expect("watch a live tree");
            let _ = w.poll(Duration::ZERO).expect("poll a live tree");
            fingerprint(&root, &IgnoreSet::none()).expect("fingerprint a live tree");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().expect("churn thread");
    });
    // Once the tree is still, every directory is watched.
    let w = Watcher::new(&root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.watch_count(), 1 + 200 * 3);
}

#[test]
fn a_missing_root_is_an_error_naming_it() {
    let t = tempdir();
    let missing = t.path().join("missing");
    let err = Watcher::new(&missing, IgnoreSet::none()).expect_err("no such root");
    assert_eq!(err.path(), missing);
    assert!(err.to_string().contains("missing"), "{err}");
    let err = fingerprint(&missing, &IgnoreSet::none()).expect_err("no such root");
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn removing_the_root_is_reported() {
    let t = tempdir();
    let root = t.path().join("root");
    write(&root.join("f"), "f");
    let mut w = Watcher::new(&root, IgnoreSet::none()).expect("watch");
    fs_err::remove_dir_all(&root).expect("rm -r");
    let mut result = w.poll(EXPECTING);
    while let Ok(seen) = result {
        assert!(seen.any(), "the root's removal is reported as an error");
        result = w.poll(EXPECTING);
    }
    assert!(
        matches!(result, Err(WatchError::RootGone { .. })),
        "{result:?}"
    );
}
