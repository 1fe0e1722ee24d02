//! A commit stays what it captured while GC runs, and while the tree is written through
//! its mount point, another mount of it, or propagated copies.

use super::*;

/// GC runs while another environment commits: nothing the committer made is freed.
#[test]
fn gc_is_safe_during_commits() {
    for fx in fixtures("gc_is_safe_during_commits") {
        let store = fx.store();
        let d1 = fx.dir("busy");
        store
            .create_env("busy", Some(&d1), Source::Empty, "e")
            .expect("create");
        let d2 = fx.dir("idle");
        store
            .create_env("idle", Some(&d2), Source::Empty, "e")
            .expect("create");
        for i in 0..5 {
            write(&d2.join("f"), &i.to_string());
            commit(&store, "idle", "x");
        }
        let root = store.root().to_owned();
        let committer = {
            let root = root.clone();
            let d1 = d1.clone();
            std::thread::spawn(move || {
                let store = Store::open(&root).expect("open");
                for i in 0..25 {
                    write(&d1.join(format!("f{i}")), &i.to_string());
                    commit(&store, "busy", &format!("c{i}"));
                }
            })
        };
        let collector = std::thread::spawn(move || {
            let store = Store::open(&root).expect("open");
            for _ in 0..10 {
                // Garbage to collect: thin the other environment's history.
                store.retain("idle", 1).expect("retain");
                store.gc().expect("gc");
            }
        });
        committer.join().expect("committer");
        collector.join().expect("collector");
        store.gc().expect("final gc");
        let report = store.fsck(false).expect("fsck");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let log = store.log("busy").expect("log");
        assert_eq!(log.len(), 26, "root and 25 commits");
        for node in log.iter().rev() {
            store.checkout("busy", &node.id).expect("checkout");
        }
        assert_eq!(read(&d1.join("f24")), "24");
    }
}

/// A commit never lets a later write change what it committed: not through a file a
/// process kept open across the commit (on `layers` the working files cannot then be
/// handed to the layer, and are copied), nor through a file opened after it (on `layers`
/// the handed-over files are no longer the working ones).
#[test]
fn writes_after_a_commit_leave_it_alone() {
    use std::io::Write as _;
    for fx in fixtures("writes_after_a_commit_leave_it_alone") {
        let store = fx.store();
        let src = fx.base.join("src");
        write(&src.join("kept.txt"), "base");
        let dir = fx.dir("w");
        store
            .create_env("w", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");

        // Held open across the commit.
        let mut held = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("kept.txt"))
            .expect("open");
        held.write_all(b" one").expect("write");
        let n1 = commit(&store, "w", "held open");
        held.write_all(b" two").expect("write after the commit");
        drop(held);

        // Nothing open during the commit, written again afterwards.
        write(&dir.join("sub/later.txt"), "first");
        let n2 = commit(&store, "w", "nothing open");
        write(&dir.join("sub/later.txt"), "second");
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("kept.txt"))
            .expect("open")
            .write_all(b" three")
            .expect("write");
        assert_eq!(read(&dir.join("kept.txt")), "base one two three");
        let n3 = commit(&store, "w", "after");

        store.checkout("w", n1.as_str()).expect("checkout n1");
        assert_eq!(read(&dir.join("kept.txt")), "base one", "{:?}", fx.kind);
        assert!(!dir.join("sub").exists(), "{:?}", fx.kind);
        store.checkout("w", n2.as_str()).expect("checkout n2");
        assert_eq!(read(&dir.join("kept.txt")), "base one two", "{:?}", fx.kind);
        assert_eq!(read(&dir.join("sub/later.txt")), "first", "{:?}", fx.kind);
        store.checkout("w", n3.as_str()).expect("checkout n3");
        assert_eq!(read(&dir.join("kept.txt")), "base one two three");
        assert_eq!(read(&dir.join("sub/later.txt")), "second", "{:?}", fx.kind);
        store.remove_env("w").expect("destroy");
    }
}

/// Nor through another mount of the same tree (what a container's volume of the
/// directory is): the unmount of a commit's handoff does not see such a mount, so on
/// `layers` a tree mounted anywhere else is never handed over (its changes are copied),
/// whether a file is open through that mount or not.
#[test]
fn writes_through_another_mount_of_the_tree_leave_a_commit_alone() {
    use std::io::Write as _;
    for fx in fixtures("writes_through_another_mount_of_the_tree_leave_a_commit_alone") {
        let store = fx.store();
        let src = fx.base.join("src");
        write(&src.join("a.txt"), "base");
        let dir = fx.dir("w");
        store
            .create_env("w", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");
        let other = fx.base.join("volume");
        std::fs::create_dir_all(&other).expect("mkdir");
        rustix::mount::mount_bind(&dir, &other).expect("bind the tree elsewhere");

        // A file open for writing through the other mount during the commit.
        write(&dir.join("a.txt"), "one");
        let mut held = std::fs::OpenOptions::new()
            .append(true)
            .open(other.join("a.txt"))
            .expect("open through the other mount");
        let n1 = commit(&store, "w", "written elsewhere");
        held.write_all(b" two").expect("write after the commit");
        drop(held);

        // Nothing open anywhere during the commit, written through the other mount after
        // it: that mount still shows the live tree.
        write(&dir.join("a.txt"), "three");
        let n2 = commit(&store, "w", "idle elsewhere");
        std::fs::write(other.join("a.txt"), "four").expect("write through the other mount");
        assert_eq!(read(&dir.join("a.txt")), "four", "{:?}", fx.kind);

        store.checkout("w", n1.as_str()).expect("checkout n1");
        assert_eq!(read(&dir.join("a.txt")), "one", "{:?}", fx.kind);
        store.checkout("w", n2.as_str()).expect("checkout n2");
        assert_eq!(read(&dir.join("a.txt")), "three", "{:?}", fx.kind);
        let _ = rustix::mount::unmount(&other, rustix::mount::UnmountFlags::DETACH);
        store.remove_env("w").expect("destroy");
    }
}

/// What mount propagation copied of the tree into another namespace (a service's private
/// namespace on a systemd host, a slave of the host's mounts) goes away with the unmount,
/// so it does not keep a `layers` commit from handing the files over; a bind mount of the
/// tree elsewhere does.
#[test]
fn propagated_copies_of_the_tree_do_not_stop_a_handoff() {
    for fx in fixtures("propagated_copies_of_the_tree_do_not_stop_a_handoff") {
        if fx.kind != agentbox_store::BackendKind::Layers {
            continue;
        }
        let store = fx.store();
        let shared = fx.base.join("shared");
        std::fs::create_dir_all(&shared).expect("mkdir");
        rustix::mount::mount_bind(&shared, &shared).expect("bind");
        rustix::mount::mount_change(&shared, rustix::mount::MountPropagationFlags::SHARED)
            .expect("make shared");
        // A namespace whose mounts are slaves of ours, made before the tree is mounted.
        let mut slave = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "sleep", "60"])
            .spawn()
            .expect("unshare (util-linux)");
        let src = fx.base.join("src");
        write(&src.join("a.txt"), "base");
        let dir = shared.join("w");
        // Until the namespace exists: its copy of the tree is what this test is about.
        let ns = format!("/proc/{}/ns/mnt", slave.id());
        while std::fs::read_link(&ns).ok() == std::fs::read_link("/proc/self/ns/mnt").ok() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        store
            .create_env("w", Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");
        let copy =
            std::fs::read_to_string(format!("/proc/{}/mountinfo", slave.id())).expect("mountinfo");
        assert!(
            copy.lines()
                .any(|l| l.contains(&format!(" {} ", dir.display()))),
            "the tree was propagated into the other namespace: {copy}"
        );
        let upper = store.root().join("envs/w/work/upper");
        write(&dir.join("a.txt"), "one");
        let n1 = commit(&store, "w", "handed over");
        assert_eq!(
            std::fs::read_dir(&upper).expect("upper").count(),
            0,
            "the changes went to the layer, the upper directory starts empty"
        );
        // An independent mount of the tree: copied instead.
        let other = fx.base.join("volume");
        std::fs::create_dir_all(&other).expect("mkdir");
        rustix::mount::mount_bind(&dir, &other).expect("bind the tree elsewhere");
        write(&dir.join("a.txt"), "two");
        commit(&store, "w", "copied");
        assert!(
            std::fs::read_dir(&upper).expect("upper").count() > 0,
            "a tree mounted elsewhere keeps its upper directory"
        );
        let _ = rustix::mount::unmount(&other, rustix::mount::UnmountFlags::DETACH);
        store.checkout("w", n1.as_str()).expect("checkout");
        assert_eq!(read(&dir.join("a.txt")), "one");
        let _ = slave.kill();
        let _ = slave.wait();
        store.remove_env("w").expect("destroy");
        let _ = rustix::mount::unmount(&shared, rustix::mount::UnmountFlags::DETACH);
    }
}
