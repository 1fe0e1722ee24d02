//! The cost of a shipment against the obvious alternative, `git clone --depth 20 file://…`
//! and a tar of the clone, in one run: `cargo nextest run -p agentbox-git --run-ignored
//! ignored-only ship_bench --no-capture`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::tests::{exec, isolated};
use super::*;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=u", "-c", "user.email=u@x"])
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// A repository of 2,000 files (40 directories of 50, about 1.5 kB each) and 20 commits (each
/// changing 100 files), with carried work: 10 files staged, 10 more changed, 5 untracked.
fn repository(root: &Path) {
    git(root, &["init", "-q", "-b", "main"]);
    let body = |d: usize, f: usize, rev: usize| -> String {
        (0..30)
            .map(|l| format!("dir {d} file {f} revision {rev} line {l} of some source text\n"))
            .collect()
    };
    for d in 0..40 {
        fs_err::create_dir_all(root.join(format!("d{d}"))).expect("mkdir");
        for f in 0..50 {
            fs_err::write(root.join(format!("d{d}/f{f}.txt")), body(d, f, 0)).expect("write");
        }
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "c0"]);
    for c in 1..20 {
        for k in 0..100 {
            let (d, f) = ((c * 7 + k) % 40, (c * 13 + k) % 50);
            fs_err::write(root.join(format!("d{d}/f{f}.txt")), body(d, f, c)).expect("write");
        }
        git(root, &["commit", "-q", "-am", &format!("c{c}")]);
    }
    for k in 0..10 {
        fs_err::write(root.join(format!("d{k}/f0.txt")), "staged\n").expect("write");
    }
    git(root, &["add", "-A"]);
    for k in 10..20 {
        fs_err::write(root.join(format!("d{k}/f0.txt")), "unstaged\n").expect("write");
    }
    for k in 0..5 {
        fs_err::write(root.join(format!("d{k}/new{k}.txt")), "untracked\n").expect("write");
    }
}

#[test]
#[ignore = "a measurement, not a check: prints figures"]
fn ship_bench() {
    isolated();
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    repository(&host);
    let repo = crate::detect(&host).expect("detect").expect("a repository");
    // Fresh commits (loose objects: every delta computed), then packed as most repositories
    // are (deltas reused).
    for (state, pass) in [("loose", 0), ("packed", 1)] {
        if pass == 1 {
            git(&host, &["gc", "-q"]);
        }
        measure(&repo, d.path(), state, pass);
    }
}

/// Five runs of both, their medians printed.
fn measure(repo: &crate::HostRepo, dir: &Path, state: &str, pass: usize) {
    let host = &repo.root;
    let runs = 5;
    let (mut ship_t, mut alt_t, mut box_t, mut alt_box_t) = (vec![], vec![], vec![], vec![]);
    let (mut ship_bytes, mut alt_bytes) = (0, 0);
    for run in 0..runs {
        let i = pass * runs + run;
        let stage = dir.join(format!("stage{i}"));
        let opts = ShipOpts {
            branch: format!("agentbox/b{i}"),
            seed: crate::SeedOpts::default(),
            depth: Depth::Adaptive,
            stage: stage.clone(),
            owner: (0, 0),
        };
        let t = Instant::now();
        let shipped = ship(repo, &format!("b{i}"), &opts).expect("ship");
        ship_t.push(t.elapsed().as_secs_f64() * 1000.0);
        ship_bytes = shipped.git_tar_bytes + shipped.files_tar_bytes;
        let boxdir = dir.join(format!("box{i}"));
        fs_err::create_dir(&boxdir).expect("mkdir");
        let t = Instant::now();
        exec(&shipped.steps(boxdir.to_str().expect("utf-8")));
        box_t.push(t.elapsed().as_secs_f64() * 1000.0);

        // The alternative: a clone of the committed history, and a tar of it.
        let clone = dir.join(format!("clone{i}"));
        let tar = dir.join(format!("clone{i}.tar"));
        let t = Instant::now();
        let url = format!("file://{}", host.display());
        git(
            dir,
            &[
                "clone",
                "-q",
                "--depth",
                "20",
                &url,
                clone.to_str().expect("utf-8"),
            ],
        );
        let out = Command::new("tar")
            .arg("-cf")
            .arg(&tar)
            .arg("-C")
            .arg(&clone)
            .arg(".")
            .output()
            .expect("tar");
        assert!(out.status.success());
        alt_t.push(t.elapsed().as_secs_f64() * 1000.0);
        alt_bytes = fs_err::metadata(&tar).expect("tar").len();
        let into = dir.join(format!("altbox{i}"));
        fs_err::create_dir(&into).expect("mkdir");
        let t = Instant::now();
        let out = Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(&into)
            .output()
            .expect("tar");
        assert!(out.status.success());
        alt_box_t.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{state} host repository, median of {runs}:\n  ship (2,000 files, 20 commits, carried work): host {:.1} ms, {} bytes; box steps {:.1} ms",
        median(&mut ship_t),
        ship_bytes,
        median(&mut box_t)
    );
    println!(
        "  git clone --depth 20 file:// + tar: host {:.1} ms, {} bytes; tar -x {:.1} ms",
        median(&mut alt_t),
        alt_bytes,
        median(&mut alt_box_t)
    );
}
