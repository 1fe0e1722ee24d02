//! Prestaging (root: real boxes on real loop filesystems): the node of a batch command
//! whose files were copied while it ran is exactly the tree it left — the same as with
//! prestaging off — whatever it did to them after the copies; a `--no-capture` command
//! copies nothing; copies left by a killed supervisor are cleaned.

use std::path::{Path, PathBuf};

use super::*;

/// Writes files (some in a directory that appears whole by a rename), lets them settle so
/// they are copied, then swaps two directories, rewrites, removes, renames, chmods,
/// truncates, links some, and changes a few more just before it ends (their copies are
/// then stale).
const SCRIPT: &str = r#"
set -e
cd /workspace
mkdir -p pkg/sub
i=0
while [ $i -lt 200 ]; do echo "file $i" > pkg/sub/f$i; i=$((i+1)); done
mkdir /tmp/whole && echo inside > /tmp/whole/w && mv /tmp/whole pkg/whole
printf AAAA > pkg/same
mkdir pkg/m1 pkg/m2 && echo one > pkg/m1/x && echo two > pkg/m2/x
sleep 1.5
mv pkg/m1 pkg/tmpm && mv pkg/m2 pkg/m1 && mv pkg/tmpm pkg/m2
echo rewritten > pkg/sub/f1
rm pkg/sub/f2
mv pkg/sub/f3 pkg/sub/g3
chmod 600 pkg/sub/f4
printf x > pkg/sub/f5
: > pkg/sub/f6
ln pkg/sub/f7 pkg/sub/f7.link
ln -s f8 pkg/sub/f8.sym
rm -r pkg/whole
mkdir pkg/whole && echo again > pkg/whole/w
sleep 1
printf BBBB > pkg/same
echo late >> pkg/sub/f9
chmod 640 pkg/sub/f10
mv pkg/sub/f11 pkg/sub/g11
"#;

/// Every entry under `/workspace/pkg` with its kind and mode, and for a regular file its
/// size, link count and content hash (`with_mtime`: and every entry's mtime), sorted. A
/// directory's size and link count are left out: over a lower directory the overlay shows
/// its own.
fn state(b: &Boxes, name: &str, with_mtime: bool) -> String {
    let fmt = if with_mtime {
        "%n %F %a %Y"
    } else {
        "%n %F %a"
    };
    b.env.ok(&[
        "exec",
        "--no-capture",
        name,
        "--",
        "sh",
        "-c",
        &format!(
            "cd /workspace/pkg && find . | sort | while read -r p; do \
             echo \"$(stat -c '{fmt}' \"$p\") $( [ -f \"$p\" ] && [ ! -L \"$p\" ] && \
             stat -c '%s %h' \"$p\" && md5sum < \"$p\")\"; done"
        ),
    ])
}

/// The box's supervisor log.
fn supervisor_log(b: &Boxes, name: &str) -> String {
    std::fs::read_to_string(b.env.path(&format!("home/boxes/{name}/supervisor.log")))
        .unwrap_or_default()
}

/// How many files the commits of `log` took from prestaged copies (`timing:` lines).
fn prestaged_in(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| {
            // `copy (N files, M of them prestaged)` (layers), `keep (M files prestaged)` (btrfs).
            let before = l
                .split(" prestaged)")
                .next()
                .filter(|_| l.contains(" prestaged)"))?;
            before
                .split(|c: char| !c.is_ascii_digit())
                .rfind(|w| !w.is_empty())?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// (Re)start box `name`'s supervisor with `envs` in its environment; returns once its
/// watcher watches (prestaging follows the watcher's events).
fn restart_with(b: &Boxes, name: &str, envs: &[(&str, &str)]) {
    b.env.ok(&["stop", name]);
    let out = b.env.run_with(&["start", name], envs);
    assert!(out.status.success(), "{out:?}");
    watching(b, name);
}

fn watching(b: &Boxes, name: &str) {
    wait_until("the box's watcher", || {
        b.env.json(&["status", name])["box"]["capture_state"]["mode"] == "watching"
    });
}

#[test]
fn a_batch_commands_node_is_the_tree_it_left_with_prestaging() {
    if !require_root("a_batch_commands_node_is_the_tree_it_left_with_prestaging") {
        return;
    }
    for fs in [
        agentbox_testkit::loopfs::LoopFs::ext4(512 << 20),
        agentbox_testkit::loopfs::LoopFs::btrfs(512 << 20),
    ] {
        let Some(fs) = fs else {
            return;
        };
        let b = Boxes::new();
        std::os::unix::fs::symlink(fs.path(), b.env.path("home")).expect("symlink home");
        let proj = project(b.env.home.path());
        b.create("on", &proj, &[]);
        b.create("off", &proj, &[]);
        let backend = b.env.json(&["status", "on"])["backend"].clone();
        // On by default on layers, off on btrfs: forced on here for both, and the handoff
        // of a quiet box (which takes no copies) off. The control (`off`) keeps it: its
        // node must be the same tree either way.
        restart_with(
            &b,
            "on",
            &[
                ("AGENTBOX_TIMINGS", "1"),
                ("AGENTBOX_PRESTAGE", "1"),
                ("AGENTBOX_QUIET_HANDOFF", "0"),
            ],
        );
        restart_with(
            &b,
            "off",
            &[("AGENTBOX_TIMINGS", "1"), ("AGENTBOX_PRESTAGE", "0")],
        );
        // Twice: the second time over the first one's node (a reinstall: every path is in
        // HEAD's layer already).
        for name in ["on", "off"] {
            b.sh_ok(name, SCRIPT);
            b.sh_ok(name, &format!("rm -rf /workspace/pkg\n{SCRIPT}"));
        }
        let log = supervisor_log(&b, "on");
        assert!(
            prestaged_in(&log) > 200,
            "{backend}: the commit took no prestaged copies:\n{log}"
        );
        let off_log = supervisor_log(&b, "off");
        assert_eq!(prestaged_in(&off_log), 0, "{backend}:\n{off_log}");
        assert!(!off_log.contains("prestaged copies offered"), "{off_log}");
        // The node is the tree the command left: the same after a checkout of it.
        let left = state(&b, "on", true);
        assert!(left.contains("./sub/g3 "), "{left}");
        b.env.ok(&["checkout", "on", "HEAD"]);
        assert_eq!(state(&b, "on", true), left, "{backend}");
        // And the same as the node made without prestaging (but for the times).
        b.env.ok(&["checkout", "off", "HEAD"]);
        assert_eq!(state(&b, "on", false), state(&b, "off", false), "{backend}");
        // Nothing of the copies is left in the store.
        let areas: Vec<_> = std::fs::read_dir(b.env.path("home/store/layers"))
            .expect("layers")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .map(|e| e.path())
            .collect();
        assert_eq!(areas, Vec::<PathBuf>::new(), "{backend}");
    }
}

/// The prestage areas in the store of `home` now.
fn areas(home: &Path) -> usize {
    std::fs::read_dir(home.join("store/layers")).map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".tmp-prestage-")
            })
            .count()
    })
}

/// Run `script` in box `name` (with `extra` arguments to `exec`) in the background; while
/// it runs, whether a prestage area was ever seen.
fn saw_an_area(b: &Boxes, name: &str, extra: &[&str], script: &str) -> bool {
    let mut args = vec!["exec"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[name, "--", "sh", "-c", script]);
    let mut child = b.command(&args).spawn().expect("exec");
    let mut seen = false;
    while child.try_wait().expect("wait").is_none() {
        seen |= areas(&b.env.path("home")) > 0;
        std::thread::sleep(Duration::from_millis(20));
    }
    seen
}

#[test]
fn a_no_capture_command_prestages_nothing() {
    let Some((b, proj)) = boxes("a_no_capture_command_prestages_nothing") else {
        return;
    };
    b.create("nc", &proj, &[]);
    // A quiet box's node is handed over, not prestaged.
    restart_with(&b, "nc", &[("AGENTBOX_QUIET_HANDOFF", "0")]);
    let script = "for i in 1 2 3 4 5; do echo $i > /workspace/n$i; done; sleep 1.5";
    assert!(
        !saw_an_area(&b, "nc", &["--no-capture"], script),
        "a --no-capture command prestaged"
    );
    // The control: a command that captures does.
    assert!(
        saw_an_area(&b, "nc", &[], script),
        "a capturing command showed no prestage area"
    );
}

#[test]
fn copies_left_by_a_killed_supervisor_are_cleaned() {
    let Some((b, proj)) = boxes("copies_left_by_a_killed_supervisor_are_cleaned") else {
        return;
    };
    b.create("k", &proj, &[]);
    restart_with(&b, "k", &[("AGENTBOX_QUIET_HANDOFF", "0")]);
    let mut child = b
        .command(&[
            "exec",
            "k",
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5; do echo $i > /workspace/k$i; done; sleep 30",
        ])
        .spawn()
        .expect("exec");
    let home = b.env.path("home");
    // Until a copy was made.
    wait_until("a prestaged copy", || {
        std::fs::read_dir(home.join("store/layers"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".tmp-prestage-")
            })
            .any(|e| std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_some()))
    });
    let pid = b.supervisor_pid("k").expect("supervisor pid");
    crate::common::kill9(pid);
    let _ = child.wait();
    wait_until("the supervisor to be gone", || {
        std::fs::read_dir(format!("/proc/{pid}/task")).map_or(true, |d| d.count() == 0)
    });
    assert_eq!(areas(&home), 1, "the copies are left behind");
    b.env.ok(&["prune"]);
    assert_eq!(areas(&home), 0, "prune (or the store's open) removed them");
}
