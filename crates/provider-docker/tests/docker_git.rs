//! A Docker box's repositories through the façade, against a real engine: uncommitted
//! paths read by the box's git, its commits brought to the host's branch by sync (a bundle
//! the box makes and the host checks), push to the host's remote, pull of the remote's
//! work into the box, and the error of an image without git.

mod common;

use agentbox_boxes::history::remote::Outcome;
use agentbox_boxes::progress::Quiet;
use agentbox_boxes::records::record;
use agentbox_boxes::BoxError;
use agentbox_core::home::Home;
use agentbox_testkit::TempHome;
use common::{
    box_name, boxes, command, dirty_repo, engine, git, leftovers, output, spec, test_image,
    tools_image, Sweep,
};

/// Exits 0 when a bundle of an exchange is left in the box's `/tmp`, else 1.
const BUNDLES_LEFT: &str =
    "for f in /tmp/.agentbox-*.bundle; do test -e \"$f\" && exit 0; done; exit 1";

/// `git ARGS` inside box `name` (in its workspace), with an identity; its status and output.
fn box_git(b: &agentbox_boxes::Boxes, name: &str, args: &[&str]) -> (i32, String) {
    let mut argv = vec!["git", "-c", "user.name=b", "-c", "user.email=b@example.org"];
    argv.extend_from_slice(args);
    output(b, name, &argv)
}

#[test]
fn a_docker_box_syncs_pushes_and_pulls_its_branch_through_its_own_git() {
    let test = "a_docker_box_syncs_pushes_and_pulls_its_branch_through_its_own_git";
    let Some(engine) = engine(test) else { return };
    let image = tools_image(&engine, false);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    // A remote the host pushes to and pulls from (the box never sees it).
    let remote = tmp.path().join("remote.git");
    std::process::Command::new("git")
        .args(["init", "-q", "--bare", "-b", "main"])
        .arg(&remote)
        .status()
        .expect("git init --bare");
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    git(
        &repo,
        &["remote", "add", "origin", &remote.to_string_lossy()],
    );
    git(&repo, &["push", "-q", "-u", "origin", "main"]);
    let boxes = boxes(&home);
    let name = box_name("git");
    boxes
        .create(&spec(&name, &repo, &image), &Quiet)
        .expect("create");
    let branch = format!("agentbox/{name}");
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();

    // The carried-over change and the untracked file are what the box's git sees (a new
    // box runs: its create saw its container stay up); a stopped box's are not known.
    let status = boxes.status(&name).expect("status");
    assert_eq!(
        status.branches[0].dirty,
        Some(vec!["a.txt".to_owned(), "u.txt".to_owned()])
    );
    assert!(boxes.stop(&name).expect("stop"));
    assert_eq!(boxes.status(&name).expect("status").branches[0].dirty, None);
    assert_eq!(
        boxes.exec(&name, command(&["true"])).expect("exec").status,
        0
    );

    // A commit in the box reaches the host's branch by sync, and only by it.
    let (st, out) = box_git(&boxes, &name, &["commit", "-q", "-am", "in the box"]);
    assert_eq!(st, 0, "{out}");
    let (_, tip) = output(&boxes, &name, &["git", "rev-parse", "HEAD"]);
    let tip = tip.trim().to_owned();
    assert_eq!(git(&repo, &["rev-parse", &branch]).trim(), base);
    let rec = record::read(&home, &name).expect("record");
    let synced = boxes.sync(&rec).expect("sync");
    assert_eq!(synced.len(), 1);
    assert_eq!(synced[0].tip.as_deref(), Some(tip.as_str()));
    assert_eq!(git(&repo, &["rev-parse", &branch]).trim(), tip);
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:a.txt")]),
        "two, then uncommitted\n"
    );
    assert_eq!(
        boxes.status(&name).expect("status").branches[0].dirty,
        Some(vec!["u.txt".to_owned()])
    );
    // Nothing of the exchange is left in the box.
    let (st, _) = output(&boxes, &name, &["sh", "-c", BUNDLES_LEFT]);
    assert_eq!(st, 1);

    // A second commit comes as a bundle of only what the host lacks.
    let (st, out) = box_git(&boxes, &name, &["add", "u.txt"]);
    assert_eq!(st, 0, "{out}");
    let (st, out) = box_git(&boxes, &name, &["commit", "-q", "-m", "second in the box"]);
    assert_eq!(st, 0, "{out}");
    let synced = boxes.sync(&rec).expect("sync");
    let tip2 = synced[0].tip.clone().expect("tip");
    assert_ne!(tip2, tip);
    assert_eq!(
        git(&repo, &["rev-parse", &format!("{branch}~1")]).trim(),
        tip
    );
    // Synced again with nothing new: the same tip, no bundle.
    assert_eq!(
        boxes.sync(&rec).expect("sync")[0].tip.as_deref(),
        Some(tip2.as_str())
    );

    // Push: the box's branch on the host's remote, with the host's credentials.
    let pushed = boxes.push(&rec, None, &[], false, &Quiet).expect("push");
    assert_eq!(pushed[0].outcome, Outcome::Pushed);
    let on_remote = std::process::Command::new("git")
        .arg("-C")
        .arg(&remote)
        .args(["rev-parse", &branch])
        .output()
        .expect("git");
    assert_eq!(String::from_utf8_lossy(&on_remote.stdout).trim(), tip2);

    // Pull: a commit on the remote's main (made on the host, unknown to the box) is merged
    // in the box, which fetched it from a bundle the host made.
    git(&repo, &["stash", "-q", "-u"]);
    fs_err::write(repo.join("b.txt"), "from upstream\n").expect("write");
    git(&repo, &["add", "b.txt"]);
    git(&repo, &["commit", "-q", "-m", "upstream"]);
    git(&repo, &["push", "-q", "origin", "main"]);
    let upstream = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let (st, _) = output(
        &boxes,
        &name,
        &["git", "cat-file", "-e", &format!("{upstream}^{{commit}}")],
    );
    assert_ne!(st, 0, "the box does not have the upstream commit yet");
    let pulled = boxes.pull(&rec, None, None, &[], &Quiet).expect("pull");
    assert_eq!(pulled[0].outcome, Outcome::Merged, "{:?}", pulled[0].output);
    assert_eq!(pulled[0].commit.as_deref(), Some(upstream.as_str()));
    let (st, out) = output(&boxes, &name, &["cat", "b.txt"]);
    assert_eq!((st, out.as_str()), (0, "from upstream\n"));
    // Pulled again: nothing to merge.
    let again = boxes.pull(&rec, None, None, &[], &Quiet).expect("pull");
    assert_eq!(again[0].outcome, Outcome::UpToDate);
    let (st, _) = output(&boxes, &name, &["sh", "-c", BUNDLES_LEFT]);
    assert_eq!(st, 1, "the pull's bundle is gone from the box");
    // The merge reaches the host by sync.
    let synced = boxes.sync(&rec).expect("sync");
    let merged = synced[0].tip.clone().expect("tip");
    assert_eq!(
        git(&repo, &["rev-parse", &format!("{merged}^2")]).trim(),
        upstream
    );

    // A bundle above the limit (`AGENTBOX_BUNDLE_LIMIT`, the host user's) is refused, and
    // the host's branch stays where it was.
    let (st, out) = output(&boxes, &name, &["sh", "-c", "echo more > c.txt"]);
    assert_eq!(st, 0, "{out}");
    let (st, out) = box_git(&boxes, &name, &["add", "c.txt"]);
    assert_eq!(st, 0, "{out}");
    let (st, out) = box_git(&boxes, &name, &["commit", "-q", "-m", "third"]);
    assert_eq!(st, 0, "{out}");
    std::env::set_var("AGENTBOX_BUNDLE_LIMIT", "64");
    match boxes.sync(&rec) {
        Err(BoxError::BoxRepo { why, .. }) => assert!(why.contains("is larger than"), "{why}"),
        other => panic!("{other:?}"),
    }
    std::env::remove_var("AGENTBOX_BUNDLE_LIMIT");
    assert_eq!(git(&repo, &["rev-parse", &branch]).trim(), merged);
    let (st, _) = output(&boxes, &name, &["sh", "-c", BUNDLES_LEFT]);
    assert_eq!(st, 1, "the refused bundle is gone from the box too");
    assert_ne!(
        boxes.sync(&rec).expect("sync")[0].tip.as_deref(),
        Some(merged.as_str())
    );

    boxes.destroy(&name, true, &Quiet).expect("destroy");
    boxes.gc().expect("gc");
    boxes
        .prune(std::time::Duration::ZERO, false)
        .expect("prune");
    assert_eq!(leftovers(&engine, &home), (Vec::new(), Vec::new()));
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        !refs.lines().any(|r| r.starts_with("refs/agentbox")),
        "{refs}"
    );
}

#[test]
fn syncing_a_docker_box_whose_image_has_no_git_says_so() {
    let test = "syncing_a_docker_box_whose_image_has_no_git_says_so";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let boxes = boxes(&home);
    let name = box_name("nogit");
    boxes
        .create(&spec(&name, &repo, &image), &Quiet)
        .expect("create");
    let rec = record::read(&home, &name).expect("record");
    match boxes.sync(&rec) {
        Err(BoxError::BoxRepo { why, .. }) => {
            assert!(why.contains("the box's image has no git"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    // Status cannot tell the uncommitted paths, and says nothing wrong about them.
    assert_eq!(boxes.status(&name).expect("status").branches[0].dirty, None);
    boxes.destroy(&name, true, &Quiet).expect("destroy");
}
