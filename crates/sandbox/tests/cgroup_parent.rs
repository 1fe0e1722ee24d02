//! Box cgroups under a parent cgroup named by `$AGENTBOX_CGROUP_PARENT`. Tier 2 (root).
//!
//! A test binary of its own, not a module of `it/`: the variable is read by every
//! `BoxCgroup::create` of the process, so setting it here would move the boxes of every
//! test running beside this one (in the same process, as `it`'s tests are) under the parent.

use std::path::{Path, PathBuf};

use agentbox_sandbox::cgroup::{BoxCgroup, CgroupError, Limits, PARENT_ENV};
use agentbox_testkit::tier::require_root;

/// Removes the box, then the parent's `agentbox` directory and the parent itself, in every
/// hierarchy.
struct Cleanup {
    name: String,
    parents: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Ok(Some(cg)) = BoxCgroup::open(&self.name) {
            if let Err(e) = cg.remove() {
                eprintln!("cleanup of box cgroup {}: {e}", self.name);
            }
        }
        for parent in &self.parents {
            let _ = std::fs::remove_dir(parent.join("agentbox"));
            let _ = std::fs::remove_dir(parent);
        }
    }
}

#[test]
fn boxes_live_under_the_configured_parent() {
    if !require_root("boxes_live_under_the_configured_parent") {
        return;
    }
    let pid = std::process::id();
    let limits = Limits {
        memory_bytes: Some(64 << 20),
        pids: Some(16),
        cpus: Some(1.0),
    };

    // The hierarchy mount points, from where a box lands by default: <mount>/agentbox/<name>.
    let probe_name = format!("test-{pid}-probe");
    let probe = BoxCgroup::create(&probe_name, &limits).expect("create probe");
    let mounts: Vec<PathBuf> = probe
        .dirs()
        .into_iter()
        .filter_map(|d| d.parent()?.parent().map(Path::to_owned))
        .collect();
    probe.remove().expect("remove probe");

    let parent_name = format!("test-parent-{pid}");
    let name = format!("test-{pid}-child");
    let _cleanup = Cleanup {
        name: name.clone(),
        parents: mounts.iter().map(|m| m.join(&parent_name)).collect(),
    };
    std::env::set_var(PARENT_ENV, format!("/{parent_name}"));

    // The parent must exist: agentbox does not make it (for a non-root user it is delegated).
    let e = BoxCgroup::create(&name, &limits).expect_err("missing parent");
    assert!(matches!(e, CgroupError::InvalidParent { .. }), "{e}");
    assert!(e.to_string().contains(&parent_name), "{e}");

    for m in &mounts {
        std::fs::create_dir(m.join(&parent_name)).expect("make parent cgroup");
    }
    let cg = BoxCgroup::create(&name, &limits).expect("create under the parent");
    assert_eq!(cg.dirs().len(), mounts.len());
    for dir in cg.dirs() {
        assert!(
            mounts
                .iter()
                .any(|m| dir == m.join(&parent_name).join("agentbox").join(&name)),
            "{} is under the parent",
            dir.display()
        );
    }
    assert_eq!(cg.limits().expect("limits"), limits);
    let opened = BoxCgroup::open(&name).expect("open").expect("exists");
    assert_eq!(opened.dirs().len(), mounts.len());
    cg.remove().expect("remove");
    assert!(BoxCgroup::open(&name).expect("open").is_none());

    std::env::set_var(PARENT_ENV, "/a/../../escape");
    let e = BoxCgroup::create(&name, &limits).expect_err("`..` in the parent");
    assert!(matches!(e, CgroupError::InvalidParent { .. }), "{e}");
}
