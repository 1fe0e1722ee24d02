//! `fork`: the work kept on a branch and number of its own, at HEAD or an older node, with
//! or without repositories; its errors leave nothing.

use crate::common::{code, git, stderr};

use super::*;

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
