//! `tournament`: which candidate wins (in order, or the soonest with `--first`), `--keep`,
//! no winner, a timeout, an interruption; none leaves anything behind.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{code, log_ids, stderr};

use super::*;

/// The candidate named `name` of a tournament's result.
fn candidate<'a>(result: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    result["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no candidate {name}: {result}"))
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

/// What `prune` would remove (or give back) now, whatever its age: the store's detached
/// nodes and layers, boxes' leftovers, interrupted commits.
fn prunable(f: &Fixture) -> serde_json::Value {
    f.env.json(&["prune", "--dry-run", "--min-age", "0"])
}

#[test]
fn an_interrupted_tournament_leaves_nothing_for_prune() {
    let Some(f) = fixture("an_interrupted_tournament_leaves_nothing_for_prune", &[]) else {
        return;
    };
    do_work(&f);
    let before = f.state("src");
    assert_eq!(
        prunable(&f),
        serde_json::json!([]),
        "nothing to prune before"
    );
    // Interrupted at each stage a signal can find it in: while the candidates are made
    // (forked from the source's node), once their commands run, and while one of them
    // writes thousands of files (its node not taken yet).
    let stages = ["making the candidates", "running", "writing"];
    for (n, stage) in stages.iter().enumerate() {
        let marker = format!("sleep 41{n}7");
        let writer = format!("w=seq 1 20000 | while read i; do echo $i > f$i; done; {marker}");
        let child = f
            .env
            .command(&[
                "tournament",
                "src",
                "--test",
                "true",
                "-c",
                &writer,
                "-c",
                &format!("s={marker}"),
                "-c",
                "t=echo done > t.txt",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the tournament");
        match n {
            0 => std::thread::sleep(Duration::from_millis(150)),
            _ => {
                wait_until("the candidates to run", Duration::from_secs(60), || {
                    !processes_with(&marker).is_empty()
                });
                if n == 2 {
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
        }
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
        let signal = if n % 2 == 0 {
            rustix::process::Signal::TERM
        } else {
            rustix::process::Signal::INT
        };
        rustix::process::kill_process(pid, signal).expect("signal");
        let out = child.wait_with_output().expect("wait");
        // Interrupted (or, when the signal came before the tournament caught signals, killed
        // by it): either way nothing may stay behind.
        assert_ne!(code(&out), Some(0), "{stage}: {}", stderr(&out));
        assert_eq!(f.leftovers("src-"), Vec::<String>::new(), "{stage}");
        assert!(processes_with(&marker).is_empty(), "{stage}");
        assert_eq!(
            prunable(&f),
            serde_json::json!([]),
            "{stage}: prune finds what the tournament left"
        );
        assert_eq!(f.state("src"), before, "{stage}");
    }
}

#[test]
fn a_tournament_interrupted_twice_leaves_what_prune_removes() {
    let Some(f) = fixture(
        "a_tournament_interrupted_twice_leaves_what_prune_removes",
        &[],
    ) else {
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
            "a=sleep 4137",
            "-c",
            "b=echo b > b.txt; sleep 4137",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the tournament");
    wait_until("the candidates to run", Duration::from_secs(60), || {
        processes_with("sleep 4137").len() >= 2
    });
    // A second signal ends the CLI at once, cleaning nothing: it says prune does.
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let out = child.wait_with_output().expect("wait");
    assert_ne!(code(&out), Some(0), "{}", stderr(&out));
    if stderr(&out).contains("interrupted again") {
        assert!(stderr(&out).contains("agentbox prune"), "{}", stderr(&out));
    }
    let pruned = f.env.json(&["prune", "--min-age", "0"]);
    // Whatever was left, prune removed it (and said so), and nothing is left for another.
    assert_eq!(f.leftovers("src-"), Vec::<String>::new(), "{pruned}");
    assert!(processes_with("sleep 4137").is_empty(), "{pruned}");
    assert_eq!(prunable(&f), serde_json::json!([]), "{pruned}");
    assert_eq!(f.state("src"), before);
}
