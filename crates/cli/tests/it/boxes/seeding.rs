//! A box made from git repositories: its own branch per repository (a repository, a
//! monorepo of several, a plain directory of them, a linked worktree), the host left alone.

use std::time::Duration;

use crate::common::{git, write};

use super::*;

#[test]
fn a_box_from_a_git_repository_gets_its_own_branch_and_leaves_the_host_alone() {
    let Some((b, _)) =
        boxes("a_box_from_a_git_repository_gets_its_own_branch_and_leaves_the_host_alone")
    else {
        return;
    };
    let repo = b.env.path("repo");
    write(&repo.join("a.txt"), "one\n");
    write(&repo.join("b.txt"), "keep\n");
    write(&repo.join("gone.txt"), "x\n");
    write(&repo.join("both.txt"), "v1\n");
    write(&repo.join("staged-rm.txt"), "x\n");
    write(&repo.join(".gitignore"), ".env\n");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    git(&repo, &["stash", "list"]);
    // Stat data the index no longer matches (a build tool touched files): not a change.
    std::thread::sleep(Duration::from_millis(1100));
    for f in ["a.txt", "b.txt", "both.txt"] {
        let file = std::fs::File::options()
            .append(true)
            .open(repo.join(f))
            .expect("open");
        file.set_modified(std::time::SystemTime::now())
            .expect("touch");
    }
    let repo_s = repo.to_str().expect("utf-8");
    b.env.ok(&["create", "clean", "--from", repo_s]);
    assert_eq!(b.sh_ok("clean", "git status --short"), "");
    b.env.ok(&["destroy", "clean", "--delete-branch"]);
    // Uncommitted work of every kind.
    write(&repo.join("a.txt"), "one\ntwo\n");
    git(&repo, &["add", "a.txt"]);
    write(&repo.join("b.txt"), "keep\nunstaged\n");
    std::fs::remove_file(repo.join("gone.txt")).expect("rm");
    write(&repo.join("both.txt"), "v2\n");
    git(&repo, &["add", "both.txt"]);
    write(&repo.join("both.txt"), "v3\n");
    git(&repo, &["rm", "-q", "staged-rm.txt"]);
    write(&repo.join("new.txt"), "untracked\n");
    write(&repo.join(".env"), "SECRET=1\n");
    let before = host_state(&repo);

    b.env.ok(&["create", "agent", "--from", repo_s]);
    b.env
        .ok(&["create", "agent2", "--from", repo_s, "--no-carry"]);
    let out = b.sh_ok(
        "agent",
        "git branch --show-current; git status --short; test -e .env && echo env || echo no-env",
    );
    assert_eq!(
        out,
        "agentbox/agent\nM  a.txt\n M b.txt\nMM both.txt\n D gone.txt\nD  staged-rm.txt\n?? new.txt\nno-env\n"
    );
    // Staged and working-tree contents both arrived.
    assert_eq!(
        b.sh_ok("agent", "git show :both.txt; cat both.txt"),
        "v2\nv3\n"
    );
    // The host keeps the carried-over objects alive (its gc must not drop what the box's
    // index refers to).
    assert!(git(&repo, &["for-each-ref", "refs/agentbox/agent/carried"]).contains("carried"));
    assert_eq!(b.sh_ok("agent2", "git status --short; cat a.txt"), "one\n");
    // The box commits on its branch; the host's objects and .git are out of reach.
    b.sh_ok(
        "agent",
        "git add -A && git commit -qm 'from the box' && git log --format=%s | head -1",
    );
    // The box's commit is on the host's copy of its branch; a rollback moves it back, and
    // the host's reflog keeps the old tip.
    let base = git(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "agentbox/agent"]),
        "from the box\n"
    );
    b.env.ok(&["undo", "agent"]);
    assert_eq!(git(&repo, &["rev-parse", "agentbox/agent"]), base);
    assert!(git(&repo, &["reflog", "agentbox/agent"]).contains("agentbox sync"));
    let synced = b.env.json(&["sync", "agent"]);
    assert_eq!(
        synced["repos"][0]["tip"].as_str().map(|t| format!("{t}\n")),
        Some(base.clone())
    );
    let (status, _, _) = b.sh("agent", "touch /run/agentbox/git/objects/x");
    assert_ne!(status, 0, "the host's objects are read-only");
    let (status, _, _) = b.sh("agent", &format!("ls {}/.git", repo.display()));
    assert_ne!(status, 0, "the host repository is not visible");
    assert_eq!(
        host_state(&repo),
        before,
        "the host repository changed while the box ran"
    );
    // The host got the boxes' branches and base pins, nothing else.
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    for r in [
        "refs/heads/agentbox/agent",
        "refs/heads/agentbox/agent2",
        "refs/agentbox/agent/base",
    ] {
        assert!(refs.contains(r), "{r} missing: {refs}");
    }
    // A third box of a taken name gets the next free branch.
    b.env.ok(&["destroy", "agent"]);
    b.env
        .ok(&["create", "agent", "--from", repo_s, "--with-env"]);
    assert_eq!(
        b.sh_ok("agent", "git branch --show-current; cat .env"),
        "agentbox/agent-2\nSECRET=1\n"
    );
    b.env.ok(&["destroy", "agent"]);
    b.env.ok(&["destroy", "agent2"]);
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        !refs.contains("refs/agentbox/"),
        "pins removed on destroy: {refs}"
    );
    assert!(
        refs.contains("refs/heads/agentbox/agent\n"),
        "branches stay: {refs}"
    );
    assert_eq!(host_state(&repo), before, "the host repository changed");
}

#[test]
fn a_monorepo_gets_a_branch_per_repository_and_leaves_every_host_repository_alone() {
    let Some((b, _)) =
        boxes("a_monorepo_gets_a_branch_per_repository_and_leaves_every_host_repository_alone")
    else {
        return;
    };
    let mono = b.env.path("mono");
    // The root ignores `web/`; `api/` is simply untracked by it.
    repo_with(&mono, &[("README", "root\n"), (".gitignore", "web/\n")]);
    repo_with(&mono.join("api"), &[("a.txt", "one\n")]);
    repo_with(&mono.join("web"), &[("w.txt", "w\n")]);
    write(&mono.join("api/a.txt"), "one\ntwo\n");
    write(&mono.join("api/new.txt"), "untracked\n");
    write(&mono.join("notes.txt"), "root untracked\n");
    let states = |which: &str| -> Vec<String> {
        let _ = which;
        vec![
            root_state(&mono, &["api", "web"]),
            host_state(&mono.join("api")),
            host_state(&mono.join("web")),
        ]
    };
    let before = states("before");
    let bases: Vec<String> = ["", "api", "web"]
        .iter()
        .map(|s| git(&mono.join(s), &["rev-parse", "HEAD"]))
        .collect();

    b.create("m", &mono, &[]);
    let out = b.sh_ok(
        "m",
        "git branch --show-current; git status --short; \
         cd api && git branch --show-current && git status --short && cat .git/objects/info/alternates; \
         cd ../web && git branch --show-current && git status --short",
    );
    assert_eq!(
        out,
        "agentbox/m\n?? api/\n?? notes.txt\n\
         agentbox/m--api\n M a.txt\n?? new.txt\n/run/agentbox/git/sub/api/objects\n\
         agentbox/m--web\n"
    );
    // No credential helper, no host config beyond the identity.
    let (_, creds, _) = b.sh(
        "m",
        "for d in . api web; do git -C $d config --get-regexp 'credential|remote' ; done; \
         env | grep -i -e cred -e askpass; cat /secret-creds",
    );
    assert_eq!(creds, "", "host configuration leaked into the box");
    assert_eq!(b.sh_ok("m", "git -C api config user.name"), "t\n");

    // One node with a commit in every repository: every host branch follows.
    b.sh_ok(
        "m",
        "git add notes.txt && git commit -qm 'box .' && \
         for d in api web; do (cd $d && git add -A && git commit -q --allow-empty -m \"box $d\") || exit 1; done",
    );
    for (sub, branch, msg) in [
        ("", "agentbox/m", "box .\n"),
        ("api", "agentbox/m--api", "box api\n"),
        ("web", "agentbox/m--web", "box web\n"),
    ] {
        assert_eq!(
            git(&mono.join(sub), &["log", "-1", "--format=%s", branch]),
            msg,
            "{branch}"
        );
        assert!(refs_of(&mono.join(sub)).contains("refs/agentbox/m/base"));
    }
    // The node records every repository's tip.
    let log = b.env.json(&["log", "m"]);
    let text = log.to_string();
    assert!(
        text.contains("agentbox/m--api") && text.contains("agentbox/m--web"),
        "{text}"
    );
    b.env.ok(&["undo", "m"]);
    for (i, (sub, branch)) in [
        ("", "agentbox/m"),
        ("api", "agentbox/m--api"),
        ("web", "agentbox/m--web"),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            git(&mono.join(sub), &["rev-parse", branch]),
            bases[i],
            "{branch}"
        );
    }
    assert_eq!(states("after"), before, "a host repository changed");
    b.env.ok(&["destroy", "m"]);
    for sub in ["", "api", "web"] {
        let refs = refs_of(&mono.join(sub));
        assert!(!refs.contains("refs/agentbox/"), "pins removed: {refs}");
        assert!(
            refs.contains("refs/heads/agentbox/m"),
            "branches stay: {refs}"
        );
    }
    assert_eq!(states("end"), before, "a host repository changed");
}

#[test]
fn a_plain_directory_of_repositories_is_copied_and_each_repository_seeded() {
    let Some((b, _)) =
        boxes("a_plain_directory_of_repositories_is_copied_and_each_repository_seeded")
    else {
        return;
    };
    let mono = b.env.path("plain");
    write(&mono.join("top.txt"), "top\n");
    write(&mono.join("docs/d.txt"), "doc\n");
    repo_with(&mono.join("api"), &[("a.txt", "one\n")]);
    repo_with(&mono.join("web"), &[("w.txt", "w\n")]);
    write(&mono.join("web/dirty.txt"), "untracked\n");
    // The name is taken in `api` only: its branch is bumped, `web`'s is not.
    git(&mono.join("api"), &["branch", "agentbox/p--api"]);
    let before: Vec<String> = ["api", "web"]
        .iter()
        .map(|s| host_state(&mono.join(s)))
        .collect();
    b.create("p", &mono, &[]);
    let out = b.sh_ok(
        "p",
        "cat top.txt docs/d.txt; test -e .git && echo root-repo; \
         git -C api branch --show-current; git -C web branch --show-current; \
         git -C web status --short; grep -c . api/.git/config >/dev/null && echo fresh",
    );
    assert_eq!(
        out,
        "top\ndoc\nagentbox/p--api-2\nagentbox/p--web\n?? dirty.txt\nfresh\n"
    );
    b.sh_ok("p", "cd web && git add -A && git commit -qm 'from the box'");
    assert_eq!(
        git(
            &mono.join("web"),
            &["log", "-1", "--format=%s", "agentbox/p--web"]
        ),
        "from the box\n"
    );
    let synced = b.env.json(&["sync", "p"]);
    assert_eq!(
        synced["repos"].as_array().map(|a| a.len()),
        Some(2),
        "{synced}"
    );
    b.env.ok(&["destroy", "p"]);
    let after: Vec<String> = ["api", "web"]
        .iter()
        .map(|s| host_state(&mono.join(s)))
        .collect();
    assert_eq!(after, before);
}

#[test]
fn a_linked_worktree_is_a_project_and_its_main_repository_stays_hidden() {
    let Some((b, _)) = boxes("a_linked_worktree_is_a_project_and_its_main_repository_stays_hidden")
    else {
        return;
    };
    let main = b.env.path("main");
    repo_with(&main, &[("a.txt", "one\n")]);
    let wt = b.env.path("wt");
    git(
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            wt.to_str().expect("utf-8"),
        ],
    );
    write(&wt.join("a.txt"), "one\nfeature work\n");
    let before = host_state(&main);
    b.create("w", &wt, &[]);
    assert_eq!(
        b.sh_ok("w", "git branch --show-current; git status --short"),
        "agentbox/w\n M a.txt\n"
    );
    // The main repository's .git (config, credentials, hooks) is out of sight.
    let (status, _, _) = b.sh("w", &format!("ls {}/.git/config", main.display()));
    assert_ne!(status, 0, "the main repository's .git is visible");
    b.sh_ok("w", "git commit -qam 'in the worktree box'");
    // Branch and pin live in the common repository.
    assert_eq!(
        git(&main, &["log", "-1", "--format=%s", "agentbox/w"]),
        "in the worktree box\n"
    );
    assert!(refs_of(&main).contains("refs/agentbox/w/base"));
    assert_eq!(git(&wt, &["branch", "--show-current"]), "feature\n");
    b.env.ok(&["destroy", "w"]);
    assert!(!refs_of(&main).contains("refs/agentbox/"));
    assert_eq!(host_state(&main), before);
}
