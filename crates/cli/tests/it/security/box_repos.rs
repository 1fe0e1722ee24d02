//! A box's git repository, handled on the host: its configuration (hooks, filters,
//! `core.*` commands) never runs there, and a sync takes only the box's own branch (a
//! forged bundle is refused). Root and rootless.

use crate::common::{code, git, stderr, write};

use super::*;

/// The box's repository names programs (an fsmonitor hook, a clean filter) that write a
/// marker where the host would see it; every host command that looks at the box's
/// repository runs them inside the box, or not at all.
fn box_repository_configuration_never_runs_on_the_host(test: &str, rootless: bool) {
    let Some(g) = GitBox::new(test, rootless) else {
        return;
    };
    // A host directory the box cannot see (the host's /tmp is not the box's).
    let marks = g.s.env.path("marks");
    std::fs::create_dir_all(&marks).expect("mkdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let hook = format!(
        "#!/bin/sh\ntouch {m}/ran-on-host 2>/dev/null\necho \"$$ $(cat /proc/1/comm)\" >> /tmp/hook-ran\nexit 1\n",
        m = marks.display()
    );
    g.sh(&format!(
        "printf '%s' '{hook}' > /root/hook; chmod +x /root/hook;
         git config core.fsmonitor /root/hook;
         git config filter.evil.clean /root/hook; git config filter.evil.smudge /root/hook;
         echo '* filter=evil' > .gitattributes; echo two >> a.txt"
    ));
    // Every host command that reads the box's repository.
    let st = g.ok(&["--json", "status", "g"]);
    assert!(
        st.contains("a.txt"),
        "status still lists the box's changes: {st}"
    );
    g.ok(&["sync", "g"]);
    g.sh("git -c user.name=u -c user.email=u@x commit -qam work || true");
    g.ok(&["commit", "g", "-m", "after"]);
    g.ok(&["sync", "g"]);
    assert!(
        !marks.join("ran-on-host").exists(),
        "a box's git hook ran on the host"
    );
    // The hooks did run: inside the box, whose PID 1 is agentbox's.
    let ran = g.sh("cat /tmp/hook-ran");
    assert!(!ran.is_empty(), "the hook never ran in the box");
    assert!(
        ran.lines().all(|l| l.ends_with(" agentbox")),
        "the hook ran outside the box's PID namespace: {ran}"
    );
}

#[test]
fn box_repository_configuration_never_runs_on_the_host_root() {
    box_repository_configuration_never_runs_on_the_host(
        "box_repository_configuration_never_runs_on_the_host_root",
        false,
    );
}

#[test]
fn box_repository_configuration_never_runs_on_the_host_rootless() {
    box_repository_configuration_never_runs_on_the_host(
        "box_repository_configuration_never_runs_on_the_host_rootless",
        true,
    );
}

/// A sync takes the box's branch and nothing else: symlinked refs, alternates naming another
/// repository of the host, and a bundle carrying more refs (made by a git the box replaced)
/// are refused, and the host repository is unchanged.
fn sync_takes_only_the_box_branch(test: &str, rootless: bool) {
    let Some(g) = GitBox::new(test, rootless) else {
        return;
    };
    // Another repository on the host, whose objects the box must never obtain.
    let other = g.s.env.path("other");
    write(&other.join("secret.txt"), "host secret\n");
    git(&other, &["init", "-q"]);
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "secret"]);
    let secret = git(&other, &["rev-parse", "HEAD"]).trim().to_owned();
    let main = g.host_rev("main");
    let synced = g.host_rev("agentbox/g");

    // Alternates naming the other repository, and the branch pointed at its commit.
    let out = g.run(&[
        "exec",
        "g",
        "--",
        "sh",
        "-c",
        &format!(
            "echo {}/.git/objects >> .git/objects/info/alternates; echo {secret} > .git/refs/heads/agentbox/g",
            other.display()
        ),
    ]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a sync with foreign alternates worked");
    assert!(stderr(&out).contains("alternates"), "{}", stderr(&out));
    assert!(
        !g.host_git(&["cat-file", "-e", &secret]).status.success(),
        "the other repository's commit reached the user's repository"
    );
    assert_eq!(g.host_rev("agentbox/g"), synced);

    // A symlinked branch ref.
    g.sh(&format!(
        "sed -i '\\#{}#d' .git/objects/info/alternates; git update-ref refs/heads/agentbox/g {synced};
         git update-ref refs/heads/elsewhere {synced};
         rm .git/refs/heads/agentbox/g; ln -s ../elsewhere .git/refs/heads/agentbox/g",
        other.display()
    ));
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a sync of a symlinked ref worked");
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));

    g.sh(&format!(
        "rm .git/refs/heads/agentbox/g; git update-ref refs/heads/agentbox/g {synced};
         echo new > b.txt; git add b.txt; git -c user.name=u -c user.email=u@x commit -qm new;
         git update-ref refs/heads/main HEAD"
    ));
    if !rootless {
        forged_bundles_are_refused(&g, &main);
    }
    // The box's branch (and only it) syncs.
    g.ok(&["sync", "g"]);
    let tip = g.sh("git rev-parse agentbox/g");
    assert_eq!(g.host_rev("agentbox/g"), tip.trim());
    assert_eq!(g.host_rev("main"), main);
}

/// A git of the box's own (a root box can put one first in `PATH`; a rootless box's `/usr`
/// is the host's, read-only) that bundles every ref, a forged main among them.
fn forged_bundles_are_refused(g: &GitBox, main: &str) {
    let synced = g.host_rev("agentbox/g");
    g.sh(
        "mkdir -p /usr/local/bin;
         printf '#!/bin/sh\\ncase \"$*\" in *bundle*) exec /usr/bin/git -C /workspace bundle create - --all;; esac\\nexec /usr/bin/git \"$@\"\\n' > /usr/local/bin/git;
         chmod +x /usr/local/bin/git;
         echo newer > b.txt; git -c user.name=u -c user.email=u@x commit -qam newer",
    );
    let out = g.run(&["sync", "g"]);
    assert_ne!(code(&out), Some(0), "a bundle with extra refs was taken");
    assert!(stderr(&out).contains("nothing else"), "{}", stderr(&out));
    assert_eq!(g.host_rev("main"), main, "the host's main moved");
    assert_eq!(g.host_rev("agentbox/g"), synced);
    g.sh("rm /usr/local/bin/git");
}

#[test]
fn sync_takes_only_the_box_branch_root() {
    sync_takes_only_the_box_branch("sync_takes_only_the_box_branch_root", false);
}

#[test]
fn sync_takes_only_the_box_branch_rootless() {
    sync_takes_only_the_box_branch("sync_takes_only_the_box_branch_rootless", true);
}
