//! Warm checkpoints end to end (root): capture a box, start new boxes from it on fresh
//! branches at the host's present, defaults, removal, secrets.
//!
//! The fixture is here; the tests in the files beside it.

use std::path::{Path, PathBuf};

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_testkit::tier::require_root;

mod create;
mod file;

pub(crate) struct Home {
    pub(crate) env: Env,
}

impl Drop for Home {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

impl Home {
    pub(crate) fn sh(&self, name: &str, script: &str) -> String {
        self.env.ok(&["exec", name, "--", "sh", "-c", script])
    }
}

/// A project repository: tracked `src.txt` and `README`, ignored `node_modules/`.
fn project(root: &Path) -> PathBuf {
    let p = root.join("proj");
    write(&p.join(".gitignore"), "node_modules/\n");
    write(&p.join("src.txt"), "v1\n");
    write(&p.join("README"), "readme\n");
    git(&p, &["init", "-q", "-b", "main"]);
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "first"]);
    p
}

pub(crate) fn setup(test: &str) -> Option<(Home, PathBuf)> {
    if !require_root(test) {
        return None;
    }
    let h = Home { env: Env::new() };
    let p = project(h.env.home.path());
    Some((h, p))
}

/// The warm box: dependencies installed (ignored), a tracked edit committed in its own
/// branch, an ignored file the host will also have as untracked.
fn warm_box(h: &Home, proj: &Path) {
    h.env
        .ok(&["create", "warm", "--from", proj.to_str().expect("utf-8")]);
    h.sh(
        "warm",
        "cd /workspace && mkdir -p node_modules/dep && echo warm > node_modules/dep/index.js \
         && echo 'box edit' > src.txt && echo local.cfg >> .gitignore \
         && git -c user.name=a -c user.email=a@b commit -qam 'box work' \
         && echo 'checkpoint cfg' > local.cfg",
    );
}
