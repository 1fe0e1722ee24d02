//! `fork` and `tournament` end to end: the real binary, real boxes (root), real git
//! repositories on the host.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{code, git, kill_supervisors, log_ids, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A temporary home and a host repository; the home's box supervisors are killed when the
/// test ends (and with them every box process).
struct Fixture {
    env: Env,
    repo: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

/// A root-tier fixture (`None`: skipped) whose repository has one commit on `main`, then a
/// modified tracked file and an untracked one (the host's uncommitted work), and box `src`
/// made from it.
fn fixture(test: &str, create: &[&str]) -> Option<Fixture> {
    if !require_root(test) {
        return None;
    }
    let env = Env::new();
    let repo = env.path("repo");
    write(&repo.join("a.txt"), "one\n");
    write(&repo.join("keep.txt"), "keep\n");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "t"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    write(&repo.join("a.txt"), "one\nhost-dirty\n");
    write(&repo.join("host-untracked.txt"), "u\n");
    let f = Fixture { env, repo };
    let mut args = vec!["create", "src", "--from", f.repo.to_str().expect("utf-8")];
    args.extend_from_slice(create);
    f.env.ok(&args);
    Some(f)
}

impl Fixture {
    /// `exec BOX -- sh -c SCRIPT`, its node recorded; stdout.
    fn sh(&self, name: &str, script: &str) -> String {
        self.env.ok(&["exec", name, "--", "sh", "-c", script])
    }

    /// `exec --no-capture BOX -- sh -c SCRIPT`: reading, recording nothing; stdout.
    fn look(&self, name: &str, script: &str) -> String {
        self.env
            .ok(&["exec", name, "--no-capture", "--", "sh", "-c", script])
    }

    /// Box `name`'s record as the home keeps it.
    fn record(&self, name: &str) -> serde_json::Value {
        let path = self.env.path("home/boxes").join(name).join("box.json");
        serde_json::from_slice(&std::fs::read(&path).expect("a record")).expect("JSON")
    }

    fn head(&self, name: &str) -> String {
        self.env.json(&["log", name])["head"]
            .as_str()
            .expect("a HEAD")
            .to_owned()
    }

    /// The host repository's refs, one `name id` a line.
    fn refs(&self) -> String {
        git(
            &self.repo,
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
    }

    /// The tip of host branch `branch`, if it exists.
    fn tip(&self, branch: &str) -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"))
            .output()
            .expect("git");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Everything of box `name` as its user sees it: the files under /workspace (contents
    /// hashed, `.git` included), git's view (branch,
    /// HEAD commit, status, stash), HEAD's node and the host's copy of its branch.
    fn state(&self, name: &str) -> String {
        let inside = self.look(
            name,
            "cd /workspace && find . -type f | LC_ALL=C sort | xargs sha256sum; \
             git branch --show-current; git rev-parse HEAD; git --no-optional-locks status --porcelain; git stash list",
        );
        format!(
            "{inside}node {}\nhost branch {:?}\n",
            self.head(name),
            self.tip(&format!("agentbox/{name}"))
        )
    }

    /// What of boxes whose names start with `prefix` is left: records, box directories,
    /// store environments, host refs, ledger entries, host mounts, box list entries.
    fn leftovers(&self, prefix: &str) -> Vec<String> {
        let home = self.env.path("home");
        let mut out = Vec::new();
        let names = |dir: PathBuf| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        for n in names(home.join("boxes")) {
            if n.starts_with(prefix) {
                out.push(format!("box directory {n}"));
            }
        }
        for n in names(home.join("store/envs")) {
            if n.starts_with(prefix) {
                out.push(format!("store environment {n}"));
            }
        }
        for line in self.refs().lines() {
            let r = line.split(' ').next().unwrap_or_default();
            if r.starts_with(&format!("refs/heads/agentbox/{prefix}"))
                || r.starts_with(&format!("refs/agentbox/{prefix}"))
            {
                out.push(format!("host ref {r}"));
            }
        }
        let pins = std::fs::read_to_string(home.join("pins.json")).unwrap_or_default();
        if pins.contains(&format!("\"{prefix}")) {
            out.push(format!("ledger entries: {pins}"));
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        for m in mounts
            .lines()
            .filter(|m| m.contains(home.to_str().expect("utf-8")))
        {
            if m.contains(&format!("/{prefix}")) {
                out.push(format!("mount {m}"));
            }
        }
        for e in self
            .env
            .json(&["list", "--all"])
            .as_array()
            .expect("a list")
        {
            let n = e["name"].as_str().unwrap_or_default();
            if n.starts_with(prefix) {
                out.push(format!("listed {n}"));
            }
        }
        out
    }

    /// `tournament ARGS --json` → (exit status, result or error).
    fn tournament(&self, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
        let mut a = vec!["--json", "tournament"];
        a.extend_from_slice(args);
        let out = self.env.run(&a);
        let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "tournament {args:?}: bad JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                stderr(&out)
            )
        });
        (code(&out), value, stderr(&out))
    }
}

/// The candidate named `name` of a tournament's result.
fn candidate<'a>(result: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    result["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no candidate {name}: {result}"))
}

/// Host processes whose command line contains `marker` (candidates' commands run as box
/// processes, which the host sees).
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("agentbox") {
                out.push(pid);
            }
        }
    }
    out
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Work in box `src`: a commit on its branch, then a tracked file changed and a new file,
/// neither committed (each command is a node).
fn do_work(f: &Fixture) {
    f.sh(
        "src",
        "git add -A && git commit -qm 'box commit' && echo box-dirty >> keep.txt && echo fresh > new.txt",
    );
}

#[test]
fn fork_keeps_the_work_on_a_branch_and_number_of_its_own() {
    let Some(f) = fixture(
        "fork_keeps_the_work_on_a_branch_and_number_of_its_own",
        &["--env", "FORKED=yes", "--keep", "7"],
    ) else {
        return;
    };
    do_work(&f);
    let src = f.record("src");
    let src_head = f.head("src");
    let before = f.state("src");
    let src_tip = f.tip("agentbox/src").expect("the box's branch is synced");

    let forked = f.env.json(&["fork", "src"]);
    assert_eq!(forked["name"], "src-fork-1");
    assert_eq!(forked["forked_from"], "src");
    assert_eq!(forked["index"], 2, "the next number of the project");
    assert_ne!(forked["id"], src["id"]);
    // The source's settings, not its identity.
    assert_eq!(forked["env"], serde_json::json!(["FORKED=yes"]));
    assert_eq!(forked["keep"], 7);
    assert_eq!(forked["repos"][0]["branch"], "agentbox/src-fork-1");
    assert_eq!(forked["repos"][0]["base"], src["repos"][0]["base"]);

    // Its repository holds the source's commits and uncommitted work, on its own branch.
    assert_eq!(
        f.look(
            "src-fork-1",
            "git branch --show-current; git log --format=%s; git --no-optional-locks status --porcelain; cat keep.txt new.txt; echo $FORKED"
        ),
        "agentbox/src-fork-1\nbox commit\nfirst\n M keep.txt\n?? new.txt\nkeep\nbox-dirty\nfresh\nyes\n"
    );
    assert_eq!(
        f.look("src-fork-1", "git branch --list 'agentbox/*'"),
        "* agentbox/src-fork-1\n",
        "the source's branch moved, not copied"
    );
    // On the host: its branch at the source's tip, its own base pin (and the carried-over
    // work's), in the home's ledger.
    assert_eq!(
        f.tip("agentbox/src-fork-1").as_deref(),
        Some(src_tip.as_str())
    );
    let refs = f.refs();
    for r in [
        "refs/agentbox/src-fork-1/base",
        "refs/agentbox/src-fork-1/carried",
    ] {
        assert!(refs.contains(r), "{r} missing: {refs}");
    }
    let pins = std::fs::read_to_string(f.env.path("home/pins.json")).expect("the ledger");
    assert!(pins.contains("\"src-fork-1\""), "{pins}");
    // Its history starts at the source's HEAD: its first node is the move of its branch.
    let log = f.env.json(&["log", "src-fork-1"]);
    let head = log["head"].as_str().expect("head");
    let first = log["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == head)
        .expect("HEAD is in the log");
    assert_eq!(first["parent"].as_str(), Some(src_head.as_str()));

    // The source is as it was.
    assert_eq!(f.state("src"), before);

    // They diverge: a commit in the fork reaches only the fork's branch.
    f.sh(
        "src-fork-1",
        "echo in-fork >> a.txt && git commit -qam 'fork commit'",
    );
    assert_eq!(
        git(
            &f.repo,
            &["log", "-1", "--format=%s", "agentbox/src-fork-1"]
        ),
        "fork commit\n"
    );
    assert_eq!(f.tip("agentbox/src").as_deref(), Some(src_tip.as_str()));
    assert_eq!(f.state("src"), before);

    // The next fork gets the next free name and number; a named one its name and branch.
    let second = f.env.json(&["fork", "src"]);
    assert_eq!(
        (&second["name"], &second["index"]),
        (&"src-fork-2".into(), &3.into())
    );
    let named = f.env.json(&["fork", "src", "other"]);
    assert_eq!(named["repos"][0]["branch"], "agentbox/other");
    assert_eq!(f.tip("agentbox/other").as_deref(), Some(src_tip.as_str()));
}

#[test]
fn fork_errors_are_clear_and_leave_nothing() {
    let Some(f) = fixture("fork_errors_are_clear_and_leave_nothing", &[]) else {
        return;
    };
    f.env.ok(&["fork", "src", "taken"]);
    let refs = f.refs();
    let listed = f.env.ok(&["list", "--all"]);
    for (args, status, says) in [
        (vec!["fork", "nope"], 3, "no box named \"nope\""),
        (
            vec!["fork", "src", "new1", "--at", "HEAD~5"],
            3,
            "box \"src\" has no node \"HEAD~5\"",
        ),
        (
            vec!["fork", "src", "new2", "--at", "no-such-tag"],
            3,
            "has no node",
        ),
        (vec!["fork", "src", "taken"], 4, "already exists"),
        (vec!["fork", "src", "bad/name"], 4, "invalid name"),
    ] {
        let out = f.env.run(&args);
        assert_eq!(code(&out), Some(status), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    // A branch the fork cannot have (taken on the host by someone else) is picked around,
    // never taken over.
    git(&f.repo, &["branch", "agentbox/mine", "main"]);
    let mine = f.env.json(&["fork", "src", "mine"]);
    assert_eq!(mine["repos"][0]["branch"], "agentbox/mine-2");
    assert_eq!(f.tip("agentbox/mine"), f.tip("main"));
    f.env.ok(&["destroy", "mine", "--delete-branch"]);
    git(&f.repo, &["branch", "-D", "agentbox/mine"]);

    assert_eq!(f.refs(), refs, "a failed fork left refs");
    assert_eq!(
        f.env.ok(&["list", "--all"]),
        listed,
        "a failed fork left a box"
    );
    for prefix in ["new1", "new2", "nope", "bad"] {
        assert_eq!(f.leftovers(prefix), Vec::<String>::new());
    }
}

#[test]
fn fork_at_an_older_node_starts_from_it() {
    let Some(f) = fixture("fork_at_an_older_node_starts_from_it", &[]) else {
        return;
    };
    f.sh(
        "src",
        "echo v1 > version && git add version && git commit -qm v1",
    );
    let v1 = f.head("src");
    let v1_tip = f.tip("agentbox/src").expect("synced");
    f.sh(
        "src",
        "echo v2 > version && git commit -qam v2 && echo scratch > scratch",
    );
    let before = f.state("src");

    let old = f.env.json(&["fork", "src", "old", "--at", &v1[..8]]);
    assert_eq!(old["name"], "old");
    assert_eq!(
        f.look(
            "old",
            "cat version; git log -1 --format=%s; test -e scratch || echo no-scratch"
        ),
        "v1\nv1\nno-scratch\n"
    );
    assert_eq!(f.tip("agentbox/old").as_deref(), Some(v1_tip.as_str()));
    let log = f.env.json(&["log", "old"]);
    let parent = log["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == log["head"])
        .and_then(|n| n["parent"].as_str().map(str::to_owned));
    assert_eq!(parent.as_deref(), Some(v1.as_str()));
    // HEAD~N counts back from the source's HEAD.
    f.env.ok(&["fork", "src", "older", "--at", "HEAD~1"]);
    assert_eq!(f.look("older", "cat version"), "v1\n");
    assert_eq!(f.state("src"), before, "the source changed");
}

#[test]
fn a_box_without_repositories_forks_at_its_node_without_starting() {
    let Some(f) = fixture(
        "a_box_without_repositories_forks_at_its_node_without_starting",
        &[],
    ) else {
        return;
    };
    f.env.ok(&["create", "plain", "--empty"]);
    f.sh(
        "plain",
        "echo data > /workspace/f && mkdir -p /opt/tool && echo t > /opt/tool/bin",
    );
    f.env.ok(&["stop", "plain"]);
    let head = f.head("plain");
    let forked = f.env.json(&["fork", "plain"]);
    assert_eq!(forked["name"], "plain-fork-1");
    assert_eq!(
        forked["head"].as_str(),
        Some(head.as_str()),
        "its HEAD is the node"
    );
    assert!(forked.get("repos").is_none(), "{forked}");
    let listed = f.env.json(&["list", "--all"]);
    let state = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["name"] == "plain-fork-1")
        .map(|e| e["state"].clone());
    assert_eq!(state, Some("stopped".into()));
    // The whole layer came along, not only /workspace.
    assert_eq!(
        f.look("plain-fork-1", "cat /workspace/f /opt/tool/bin"),
        "data\nt\n"
    );
}

#[test]
fn a_tournament_picks_the_first_passing_candidate_in_the_order_given() {
    let Some(f) = fixture(
        "a_tournament_picks_the_first_passing_candidate_in_the_order_given",
        &[],
    ) else {
        return;
    };
    do_work(&f);
    // A process of the source's: it must run on, untouched.
    let spawned = f.env.json(&["spawn", "src", "--", "sleep", "4101"]);
    let before = f.state("src");
    let ps = |f: &Fixture| {
        f.env
            .json(&["ps", "src"])
            .as_array()
            .expect("ps")
            .iter()
            .filter(|p| p["exit"].is_null())
            .map(|p| (p["id"].clone(), p["pid"].clone()))
            .collect::<Vec<_>>()
    };
    let running = ps(&f);
    assert!(running.contains(&(spawned["id"].clone(), spawned["pid"].clone())));

    let (status, result, err) = f.tournament(&[
        "src",
        "--test",
        "grep -q good answer",
        "-c",
        "broken=echo bad > answer",
        "-c",
        "slow=sleep 1; echo good > answer; git add answer; git commit -qm slow",
        "-c",
        "quick=echo good > answer",
    ]);
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(
        result["winner"], "slow",
        "the first passing in the order given"
    );
    assert_eq!(result["winner_box"], "src-slow");
    assert_eq!(result["base"].as_str(), Some(f.head("src").as_str()));
    let (broken, slow, quick) = (
        candidate(&result, "broken"),
        candidate(&result, "slow"),
        candidate(&result, "quick"),
    );
    assert_eq!(
        (
            &broken["verdict"],
            &broken["cmd_exit"],
            &broken["test_exit"]
        ),
        (&"failed".into(), &0.into(), &1.into())
    );
    assert_eq!(slow["verdict"], "won");
    assert_eq!(quick["verdict"], "passed");
    assert_eq!(quick["test_exit"], 0);
    assert!(
        broken["output"]
            .as_str()
            .unwrap_or_default()
            .contains("$ grep -q good answer"),
        "{broken}"
    );

    // The winner is kept: its box, work, branch (at its commit) and log.
    assert_eq!(
        f.look("src-slow", "cat answer; git log -1 --format=%s"),
        "good\nslow\n"
    );
    let win_tip = slow["branches"][0]["tip"]
        .as_str()
        .expect("a tip")
        .to_owned();
    assert_eq!(
        f.tip("agentbox/src-slow").as_deref(),
        Some(win_tip.as_str())
    );
    let log = PathBuf::from(slow["log"].as_str().expect("a log"));
    let text = std::fs::read_to_string(&log).expect("the winner's log");
    assert!(text.contains("$ grep -q good answer\n[exit 0]"), "{text}");
    // The losers are gone, branches and all.
    assert_eq!(f.leftovers("src-broken"), Vec::<String>::new());
    assert_eq!(f.leftovers("src-quick"), Vec::<String>::new());
    assert_eq!(quick["kept"], false);
    // The source is exactly as it was, its process still running.
    assert_eq!(f.state("src"), before);
    assert_eq!(ps(&f), running);
}

#[test]
fn with_first_the_soonest_passing_candidate_wins() {
    let Some(f) = fixture("with_first_the_soonest_passing_candidate_wins", &[]) else {
        return;
    };
    let before = f.state("src");
    let (status, result, err) = f.tournament(&[
        "src",
        "--first",
        "--test",
        "test -f done",
        "-c",
        "slow=sleep 4102; touch done",
        "-c",
        "fast=sleep 0.5; touch done",
    ]);
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(result["winner"], "fast");
    let slow = candidate(&result, "slow");
    assert_eq!(slow["verdict"], "lost", "{slow}");
    assert!(slow["test_exit"].is_null(), "its test never ran: {slow}");
    assert_eq!(f.leftovers("src-slow"), Vec::<String>::new());
    assert!(
        processes_with("sleep 4102").is_empty(),
        "the loser was stopped"
    );
    assert_eq!(f.look("src-fast", "ls done"), "done\n");
    assert_eq!(f.state("src"), before);
}

#[test]
fn keep_moves_the_source_to_the_winner() {
    let Some(f) = fixture("keep_moves_the_source_to_the_winner", &[]) else {
        return;
    };
    do_work(&f);
    let (status, result, err) = f.tournament(&[
        "src",
        "--keep",
        "--test",
        "grep -q yes verdict",
        "-c",
        "no=echo no > verdict",
        "-c",
        "yes=echo yes > verdict && git add verdict && git commit -qm chosen",
    ]);
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(result["winner"], "yes");
    let yes = candidate(&result, "yes");
    let win_tip = yes["branches"][0]["tip"]
        .as_str()
        .expect("a tip")
        .to_owned();
    let moved = &result["moved"];
    assert_eq!(moved["branches"][0]["branch"], "agentbox/src");
    assert_eq!(moved["branches"][0]["tip"].as_str(), Some(win_tip.as_str()));
    // The source holds the winner's tree, on its own branch at the winner's commit (the
    // work it had before the tournament included).
    assert_eq!(
        f.look(
            "src",
            "cat verdict keep.txt; git branch --show-current; git rev-parse HEAD; git log -1 --format=%s"
        ),
        format!("yes\nkeep\nbox-dirty\nagentbox/src\n{win_tip}\nchosen\n")
    );
    assert_eq!(f.tip("agentbox/src").as_deref(), Some(win_tip.as_str()));
    assert_eq!(f.head("src"), moved["node"].as_str().expect("a node"));
    // Its history runs through the winner's node.
    let log = f.env.json(&["log", "src"]);
    let ids = log_ids(&log);
    assert!(ids.contains(&result["winner_node"].as_str().expect("a node")));
    // Both candidates' boxes are gone: the winner's work is the source's now.
    assert!(result["winner_box"].is_null());
    assert_eq!(f.leftovers("src-"), Vec::<String>::new());

    // A stopped source moves too, and is stopped again.
    f.env.ok(&["stop", "src"]);
    let (status, result, err) = f.tournament(&[
        "src",
        "--keep",
        "--test",
        "true",
        "-c",
        "again=echo again > verdict && git commit -qam again",
    ]);
    assert_eq!(status, Some(0), "{err}");
    let tip = result["moved"]["branches"][0]["tip"]
        .as_str()
        .expect("a tip")
        .to_owned();
    let state = f
        .env
        .json(&["list", "--all"])
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["name"] == "src")
        .map(|e| e["state"].clone());
    assert_eq!(state, Some("stopped".into()));
    assert_eq!(f.tip("agentbox/src").as_deref(), Some(tip.as_str()));
    assert_eq!(
        f.look("src", "cat verdict; git log -1 --format=%s"),
        "again\nagain\n"
    );
    assert_eq!(f.leftovers("src-"), Vec::<String>::new());
}

#[test]
fn a_tournament_without_a_passing_candidate_exits_1_and_leaves_nothing() {
    let Some(f) = fixture(
        "a_tournament_without_a_passing_candidate_exits_1_and_leaves_nothing",
        &[],
    ) else {
        return;
    };
    do_work(&f);
    let before = f.state("src");
    let (status, result, err) = f.tournament(&[
        "src",
        "--parallel",
        "1",
        "--test",
        "false",
        "-c",
        "one=echo 1 > n",
        "-c",
        "two=exit 3",
    ]);
    assert_eq!(status, Some(1), "{err}");
    assert!(result["winner"].is_null());
    assert_eq!(candidate(&result, "two")["cmd_exit"], 3);
    assert!(
        candidate(&result, "two")["test_exit"].is_null(),
        "no test after a failed command"
    );
    assert_eq!(candidate(&result, "one")["test_exit"], 1);
    assert_eq!(f.leftovers("src-"), Vec::<String>::new());
    assert_eq!(f.state("src"), before);
    // Candidates are checked before anything is made.
    let out = f.env.run(&[
        "tournament",
        "src",
        "--test",
        "true",
        "-c",
        "a=true",
        "-c",
        "a=false",
    ]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("two candidates have this name"),
        "{}",
        stderr(&out)
    );
    let out = f
        .env
        .run(&["tournament", "src", "--test", "true", "-c", "nameless"]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert_eq!(f.leftovers("src-"), Vec::<String>::new());
}

#[test]
fn a_hanging_candidate_is_stopped_by_the_timeout() {
    let Some(f) = fixture("a_hanging_candidate_is_stopped_by_the_timeout", &[]) else {
        return;
    };
    let before = f.state("src");
    let (status, result, err) = f.tournament(&[
        "src",
        "--timeout",
        "2s",
        "--test",
        "true",
        "-c",
        "hang=sleep 4103",
        "-c",
        "ok=true",
    ]);
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(result["winner"], "ok");
    let hang = candidate(&result, "hang");
    assert_eq!(hang["verdict"], "timed-out", "{hang}");
    assert!(hang["cmd_exit"].is_null());
    assert!(
        hang["output"]
            .as_str()
            .unwrap_or_default()
            .contains("[stopped: it ran past the timeout]"),
        "{hang}"
    );
    assert_eq!(f.leftovers("src-hang"), Vec::<String>::new());
    assert!(
        processes_with("sleep 4103").is_empty(),
        "the hanging command was killed"
    );

    // Alone, it fails the tournament, and nothing is left.
    let (status, result, err) = f.tournament(&[
        "src",
        "--timeout",
        "1s",
        "--test",
        "true",
        "-c",
        "stuck=sleep 4104",
    ]);
    assert_eq!(status, Some(1), "{err}");
    assert_eq!(candidate(&result, "stuck")["verdict"], "timed-out");
    assert_eq!(f.leftovers("src-stuck"), Vec::<String>::new());
    assert!(processes_with("sleep 4104").is_empty());
    assert_eq!(f.state("src"), before);
}

#[test]
fn an_interrupted_tournament_removes_every_candidate() {
    let Some(f) = fixture("an_interrupted_tournament_removes_every_candidate", &[]) else {
        return;
    };
    do_work(&f);
    let before = f.state("src");
    let child = f
        .env
        .command(&[
            "tournament",
            "src",
            "--test",
            "true",
            "-c",
            "a=sleep 4105",
            "-c",
            "b=sleep 4106",
            "-c",
            "c=true",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the tournament");
    // Mid-run: both sleeping candidates are running in their boxes.
    wait_until("the candidates to run", Duration::from_secs(60), || {
        !processes_with("sleep 4105").is_empty() && !processes_with("sleep 4106").is_empty()
    });
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(code(&out), Some(130), "{}", stderr(&out));
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "no result is printed");
    // Every candidate is gone, the finished one too; their commands were killed.
    assert_eq!(f.leftovers("src-"), Vec::<String>::new());
    assert!(processes_with("sleep 4105").is_empty());
    assert!(processes_with("sleep 4106").is_empty());
    assert_eq!(f.state("src"), before);
}
