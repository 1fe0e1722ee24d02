//! `destroy` of a box that wrote many files: the box is gone when the command returns, its
//! working files are deleted by a process of its own, and a deletion that stops half-way
//! leaves a leftover that `prune` removes (root: real boxes).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{git, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A home whose box supervisors die with the test.
struct Home {
    env: Env,
}

impl Drop for Home {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

impl Home {
    fn run(&self, dir: &Path, args: &[&str], failpoint: Option<&str>) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentbox"));
        c.env("AGENTBOX_HOME", self.env.path("home"))
            .current_dir(dir)
            .args(args);
        if let Some(f) = failpoint {
            c.env("AGENTBOX_FAILPOINT", f);
        }
        c.output().expect("run agentbox")
    }

    fn ok(&self, dir: &Path, args: &[&str], failpoint: Option<&str>) -> String {
        let out = self.run(dir, args, failpoint);
        assert!(
            out.status.success(),
            "agentbox {args:?} failed: {}",
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The discarded working areas in the store's `tmp/`.
    fn discarded(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.env.path("home/store/tmp"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("discarded-"))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A project and a box of it whose working layer holds 300 files.
fn busy_box(h: &Home, name: &str) -> PathBuf {
    let project = h.env.path("proj");
    if !project.join(".git").exists() {
        write(&project.join("src/lib.rs"), "pub fn f() {}\n");
        git(&project, &["init", "-q", "-b", "main"]);
        git(&project, &["add", "-A"]);
        git(&project, &["commit", "-qm", "first"]);
    }
    h.ok(&project, &["create", name], None);
    h.ok(
        &project,
        &[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            "mkdir -p out && for i in $(seq 1 300); do echo $i > out/f$i; done",
        ],
        None,
    );
    project
}

#[test]
fn destroy_leaves_the_deletion_of_the_working_files_to_a_process_of_its_own() {
    if !require_root("destroy_leaves_the_deletion_of_the_working_files_to_a_process_of_its_own") {
        return;
    }
    let h = Home { env: Env::new() };
    let project = busy_box(&h, "doomed");
    // The process that deletes the files dies before it starts (as a kill would leave it):
    // the box is gone all the same, and its files were only set aside, not deleted by
    // `destroy` itself.
    h.ok(
        &project,
        &["destroy", "doomed"],
        Some("discard:before-remove"),
    );
    assert!(!h.env.path("home/boxes/doomed").exists());
    assert!(!h.env.path("home/store/envs/doomed").exists());
    let deadline = Instant::now() + Duration::from_secs(30);
    let set_aside = loop {
        // The deleting process may still be starting: it takes the store lock first.
        let found = h.discarded();
        if !found.is_empty() || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    let name = set_aside[0]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("discarded-doomed-"), "{name}");
    // What the crash left is a leftover `prune` removes: nothing stays behind.
    h.ok(&project, &["prune", "--min-age", "0"], None);
    assert!(h.discarded().is_empty(), "{:?}", h.discarded());

    // Without a crash the deleting process finishes the job by itself.
    busy_box(&h, "second");
    h.ok(&project, &["destroy", "second"], None);
    assert!(!h.env.path("home/store/envs/second").exists());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !h.discarded().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(h.discarded().is_empty(), "{:?}", h.discarded());
    let fsck = h.ok(&project, &["fsck"], None);
    assert!(fsck.contains("consistent"), "{fsck}");

    // Right after `destroy` returns, a deletion still under way is no leftover: `fsck`
    // and `prune` do not report it as stopped, and `prune` leaves it to its process.
    busy_box(&h, "third");
    h.ok(&project, &["destroy", "third"], None);
    let fsck = h.ok(&project, &["fsck"], None);
    assert!(fsck.contains("consistent"), "{fsck}");
    busy_box(&h, "fourth");
    h.ok(&project, &["destroy", "fourth"], None);
    let pruned = h.ok(
        &project,
        &["--json", "prune", "--dry-run", "--min-age", "0"],
        None,
    );
    assert!(!pruned.contains("discarded-"), "{pruned}");
}
