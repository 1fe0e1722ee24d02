//! The in-box `agentbox` (the relay) reaches only its own box: its references resolve in the
//! box's own history (another box's, project's or versioned directory's node is "no such
//! node", exactly as one that never existed), and the checkpoints it makes never replace one
//! or become its project's default. Root and rootless.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{code, git, kill_supervisors, log_ids, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A home with boxes run as root, or (rootless) by the user `nobody`.
struct Home {
    env: Env,
    /// `Some(home)`: the agentbox home of `nobody`, who runs everything.
    nobody: Option<PathBuf>,
}

impl Drop for Home {
    fn drop(&mut self) {
        kill_supervisors(&self.home());
    }
}

impl Home {
    fn new(test: &str, rootless: bool) -> Option<Home> {
        if !require_root(test) {
            return None;
        }
        let env = Env::new();
        let nobody = rootless.then(|| {
            use std::os::unix::fs::PermissionsExt;
            let root = env.home.path();
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            let home = root.join("nobody-home");
            std::fs::create_dir(&home).expect("mkdir");
            std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), home.join("agentbox")).expect("copy");
            home
        });
        let h = Home { env, nobody };
        if let Some(home) = &h.nobody {
            h.chown(home);
        }
        Some(h)
    }

    /// The agentbox home.
    fn home(&self) -> PathBuf {
        match &self.nobody {
            Some(h) => h.clone(),
            None => self.env.path("home"),
        }
    }

    /// A git repository `name` with `files` committed and `node_modules/` ignored, owned by
    /// whoever runs the boxes.
    fn project(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.env.path(name);
        write(&dir.join(".gitignore"), "node_modules/\n");
        for (f, text) in files {
            write(&dir.join(f), text);
        }
        git(&dir, &["init", "-q", "-b", "main"]);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-qm", "first"]);
        self.chown(&dir);
        dir
    }

    /// Make `path` (recursively) the rootless user's, when boxes are rootless.
    fn chown(&self, path: &Path) {
        if self.nobody.is_some() {
            crate::common::chown_nobody(path);
        }
    }

    /// `agentbox ARGS` in directory `dir`.
    fn run_in(&self, dir: &Path, args: &[&str]) -> Output {
        match &self.nobody {
            Some(home) => std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(home.join("agentbox"))
                .args(args)
                .env("AGENTBOX_HOME", home)
                .env("HOME", home)
                .env_remove("AGENTBOX_FAILPOINT")
                .current_dir(dir)
                .output()
                .expect("setpriv"),
            None => self
                .env
                .command(args)
                .current_dir(dir)
                .output()
                .expect("agentbox"),
        }
    }

    fn ok_in(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.run_in(dir, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn ok(&self, args: &[&str]) -> String {
        self.ok_in(Path::new("/"), args)
    }

    fn json_in(&self, dir: &Path, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.ok_in(dir, &a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        self.json_in(Path::new("/"), args)
    }

    /// `sh -c SCRIPT` in box `name`: (status, stdout and stderr).
    fn sh(&self, name: &str, script: &str) -> (i32, String, String) {
        let out = self.run_in(Path::new("/"), &["exec", name, "--", "sh", "-c", script]);
        (
            code(&out).unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    }

    /// Every store ref of the home (`ns/…/name`), read from the store's files as root.
    fn refs(&self) -> Vec<String> {
        fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let full = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                };
                if e.path().is_dir() {
                    walk(&e.path(), &full, out);
                } else if !full.contains(".tmp") {
                    out.push(full);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.home().join("store").join("refs"), "", &mut out);
        out
    }
}

/// The node ids of environment `env`'s history.
fn ids(h: &Home, env: &str) -> Vec<String> {
    log_ids(&h.json(&["log", env]))
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// The in-box commands that take a node, with `R` standing for the reference.
const ATTACKS: &[&str] = &[
    "show R",
    "diff -p R",
    "diff R HEAD",
    "diff HEAD R",
    "checkout --keep-processes R",
    "tag stolen R",
];

/// Run every attack with every reference of `refs` inside box `name`: (reference, attack) →
/// what it printed (stdout and stderr) and its exit status, with the reference written `R`.
fn attack(h: &Home, name: &str, refs: &[String]) -> BTreeMap<(String, String), String> {
    let mut script = String::new();
    for r in refs {
        for a in ATTACKS {
            let cmd = a.replace('R', r);
            script.push_str(&format!(
                "echo '### {r} {a}'; agentbox {cmd} 2>&1; echo \"status $?\"\n"
            ));
        }
    }
    let (_, out, err) = h.sh(name, &script);
    let mut found = BTreeMap::new();
    let mut key: Option<(String, String)> = None;
    for line in out.lines() {
        if let Some(head) = line.strip_prefix("### ") {
            let (r, a) = head.split_once(' ').expect("a header");
            key = Some((r.to_owned(), a.to_owned()));
            found.insert(key.clone().expect("set"), String::new());
            continue;
        }
        let k = key
            .as_ref()
            .unwrap_or_else(|| panic!("output before any header: {out}{err}"));
        let text = found.get_mut(k).expect("inserted");
        text.push_str(&line.replace(k.0.as_str(), "R"));
        text.push('\n');
    }
    assert_eq!(
        found.len(),
        refs.len() * ATTACKS.len(),
        "every attack ran: {out}{err}"
    );
    found
}

/// A `len`-character hex string that starts none of `ids`.
fn unused(ids: &[String], len: usize) -> String {
    (0u32..)
        .map(|i| format!("{i:0len$x}"))
        .find(|p| !ids.iter().any(|id| id.starts_with(p.as_str())))
        .expect("a free prefix")
}

fn in_box_agentbox_reaches_only_its_own_history(test: &str, rootless: bool) {
    let Some(h) = Home::new(test, rootless) else {
        return;
    };
    // Box b of another project, with a secret in its history and a checkpoint.
    let proj_b = h.project("proj-b", &[("secret.txt", "b's secret\n")]);
    h.ok(&["create", "b", "--from", proj_b.to_str().expect("utf-8")]);
    let (status, _, err) = h.sh("b", "echo more of b > /workspace/more.txt");
    assert_eq!(status, 0, "{err}");
    h.ok(&["commit", "b", "-m", "b's work"]);
    let b_cp = h.json_in(&proj_b, &["checkpoint", "create", "b", "--name", "bcp"]);
    let b_cp_node = b_cp["node"].as_str().expect("node").to_owned();
    // A versioned host directory (the layers backend mounts it: root only).
    let mut others = vec!["b", "a0"];
    if !rootless {
        let vdir = h.env.path("vdir");
        write(&vdir.join("host-secret"), "the host's secret\n");
        h.ok(&["env", vdir.to_str().expect("utf-8")]);
        write(&vdir.join("more"), "more\n");
        h.ok(&["commit", "vdir", "-m", "host work"]);
        others.push("vdir");
    }
    // Box a of its own project, made from a checkpoint of its project (box a0's).
    let proj_a = h.project("proj-a", &[("README", "a\n")]);
    let from_a = proj_a.to_str().expect("utf-8");
    h.ok(&["create", "a0", "--from", from_a]);
    let (status, _, err) = h.sh(
        "a0",
        "mkdir -p /workspace/node_modules && echo warm > /workspace/node_modules/warm.txt",
    );
    assert_eq!(status, 0, "{err}");
    let a_cp = h.json_in(&proj_a, &["checkpoint", "create", "a0", "--name", "acp"]);
    let a_cp_node = a_cp["node"].as_str().expect("node").to_owned();
    h.ok_in(
        &proj_a,
        &["create", "a", "--from", from_a, "--checkpoint", "acp"],
    );
    let (status, _, err) = h.sh("a", "echo mine > /workspace/mine.txt");
    assert_eq!(status, 0, "{err}");
    h.ok(&["commit", "a", "-m", "a's work"]);
    // A later node of a0, not in a's history.
    let (status, _, err) = h.sh("a0", "echo after > /workspace/after.txt");
    assert_eq!(status, 0, "{err}");
    h.ok(&["commit", "a0", "-m", "a0 after the checkpoint"]);
    // A checkpoint of a's own project that a was not made from.
    let later = h.json_in(&proj_a, &["checkpoint", "create", "a0", "--name", "later"]);
    let later_node = later["node"].as_str().expect("node").to_owned();

    let own = ids(&h, "a");
    assert!(own.contains(&a_cp_node), "a descends from acp: {own:?}");
    let mut foreign: Vec<String> = others
        .iter()
        .flat_map(|e| ids(&h, e))
        .chain([b_cp_node.clone(), later_node])
        .filter(|id| !own.contains(id))
        .collect();
    foreign.sort();
    foreign.dedup();
    assert!(foreign.len() >= 5, "{foreign:?}");
    let all: Vec<String> = own.iter().chain(&foreign).cloned().collect();
    let refs = h.refs();
    let b_ref = refs
        .iter()
        .find(|r| r.starts_with("checkpoints/") && r.ends_with("/bcp"))
        .unwrap_or_else(|| panic!("b's checkpoint ref: {refs:?}"))
        .clone();
    let a_ref = refs
        .iter()
        .find(|r| r.starts_with("checkpoints/") && r.ends_with("/acp"))
        .unwrap_or_else(|| panic!("a's checkpoint ref: {refs:?}"))
        .clone();
    let later_ref = a_ref.replace("/acp", "/later");
    assert!(refs.contains(&later_ref), "{refs:?}");
    let a_head = h.json(&["show", "a"])["node"]["id"]
        .as_str()
        .expect("head")
        .to_owned();
    let before: Vec<(String, Vec<String>)> =
        others.iter().map(|e| (e.to_string(), ids(&h, e))).collect();

    // Each foreign node by full id, 4-hex and 8-hex prefix (those no node of a's starts
    // with: there it is a's own), the other project's checkpoint ref; and, as the baseline,
    // references that name nothing at all.
    let mut attacks: Vec<String> = Vec::new();
    for f in &foreign {
        attacks.push(f.clone());
        for len in [4, 8] {
            let p = &f[..len];
            if !own.iter().any(|o| o.starts_with(p)) {
                attacks.push(p.to_owned());
            }
        }
    }
    attacks.extend([b_ref.clone(), later_ref]);
    attacks.sort();
    attacks.dedup();
    let nothing_full = unused(&all, 16);
    let nothing_short = unused(&all, 4);
    let nothing_ref = format!("{}/nothing", a_ref.rsplit_once('/').expect("a ref").0);
    let mut refs_run = attacks.clone();
    refs_run.extend([
        nothing_full.clone(),
        nothing_short.clone(),
        nothing_ref.clone(),
    ]);
    let found = attack(&h, "a", &refs_run);

    for r in &attacks {
        let baseline = if r.contains('/') {
            &nothing_ref
        } else if r.len() == 16 {
            &nothing_full
        } else {
            &nothing_short
        };
        for a in ATTACKS {
            let got = &found[&(r.clone(), a.to_string())];
            let want = &found[&(baseline.clone(), a.to_string())];
            assert_eq!(
                got, want,
                "`{a}` with {r} differs from a node that does not exist"
            );
            assert!(got.contains("no node or tag matches"), "{a} {r}: {got}");
            for f in &foreign {
                assert!(!got.contains(f.as_str()), "{a} {r} printed {f}: {got}");
            }
        }
    }
    // Nothing moved: a's HEAD and tags, the other environments' histories.
    assert_eq!(h.json(&["show", "a"])["node"]["id"], a_head.as_str());
    assert_eq!(h.json(&["tag", "a"]), serde_json::json!({}));
    for (e, was) in &before {
        assert_eq!(&ids(&h, e), was, "{e}'s history changed");
    }

    // The box's own history still resolves: HEAD~N, an id prefix, its project's checkpoint
    // it was made from, and a tag of its own.
    let own_prefix = &a_head[..6];
    let (status, out, err) = h.sh(
        "a",
        &format!(
            "agentbox show {own_prefix} && agentbox show HEAD~1 && agentbox show {a_ref} \
             && agentbox diff -p {a_ref} HEAD && agentbox tag mine {a_cp_node}"
        ),
    );
    assert_eq!(status, 0, "{out}{err}");
    assert!(out.contains("mine.txt"), "{out}");
    assert_eq!(
        h.json(&["tag", "a"]),
        serde_json::json!({ "mine": a_cp_node })
    );
    // (The checkout kills the shell that asked for it.)
    let (_, out, err) = h.sh("a", &format!("agentbox checkout {a_ref}"));
    assert_eq!(
        h.json(&["show", "a"])["node"]["id"],
        a_cp_node.as_str(),
        "{out}{err}"
    );
    let (_, out, err) = h.sh("a", "ls /workspace /workspace/node_modules");
    assert!(
        out.contains("warm.txt") && !out.contains("mine.txt"),
        "{out}{err}"
    );
}

#[test]
fn in_box_agentbox_reaches_only_its_own_history_root() {
    in_box_agentbox_reaches_only_its_own_history(
        "in_box_agentbox_reaches_only_its_own_history_root",
        false,
    );
}

#[test]
fn in_box_agentbox_reaches_only_its_own_history_rootless() {
    in_box_agentbox_reaches_only_its_own_history(
        "in_box_agentbox_reaches_only_its_own_history_rootless",
        true,
    );
}

fn in_box_checkpoints_never_replace_or_become_the_default(test: &str, rootless: bool) {
    let Some(h) = Home::new(test, rootless) else {
        return;
    };
    let proj = h.project("proj", &[("README", "readme\n")]);
    let from = proj.to_str().expect("utf-8");
    h.ok(&["create", "a", "--from", from]);
    let golden = h.json_in(
        &proj,
        &[
            "checkpoint",
            "create",
            "a",
            "--name",
            "golden",
            "--set-default",
        ],
    );
    let golden_node = golden["node"].as_str().expect("node").to_owned();
    let (status, _, err) = h.sh("a", "echo planted > /workspace/planted");
    assert_eq!(status, 0, "{err}");
    for attack in [
        "agentbox checkpoint create --name golden --replace --set-default",
        "agentbox checkpoint create --name golden --replace",
        "agentbox checkpoint create --name evil --set-default",
        "agentbox checkpoint create --set-default",
    ] {
        let (status, out, err) = h.sh("a", attack);
        assert_eq!(status, 4, "{attack}: {out}{err}");
        assert!(
            err.contains("inside a box a checkpoint cannot replace one or become the default")
                && err.contains("agentbox checkpoint set-default"),
            "{attack}: {err}"
        );
    }
    // An existing name, and the name of the project's own counters file.
    let (status, _, err) = h.sh("a", "agentbox checkpoint create --name golden");
    assert_eq!(status, 4, "{err}");
    assert!(err.contains("already exists"), "{err}");
    let (status, _, err) = h.sh("a", "agentbox checkpoint create --name counters");
    assert_ne!(status, 0, "{err}");
    assert!(err.contains("reserved"), "{err}");
    for attack in [
        "agentbox checkpoint rm golden",
        "agentbox checkpoint set-default a-1",
        "agentbox checkpoint set-default --clear",
    ] {
        let (status, _, err) = h.sh("a", attack);
        assert_eq!(status, 4, "{attack}: {err}");
        assert!(
            err.contains("not available inside a box"),
            "{attack}: {err}"
        );
    }
    // The name the project's configuration makes its default, no checkpoint having it.
    h.ok_in(&proj, &["config", "set", "box.defaultCheckpoint", "future"]);
    let (status, _, err) = h.sh("a", "agentbox checkpoint create --name future");
    assert_eq!(status, 4, "{err}");
    assert!(
        err.contains("cannot replace one or become the default"),
        "{err}"
    );
    h.ok_in(&proj, &["config", "set", "box.defaultCheckpoint", "golden"]);
    // A new name is the box's to add; it takes the next default name of box a, which the
    // host's next capture then goes past.
    let (status, out, err) = h.sh("a", "agentbox checkpoint create --name a-1");
    assert_eq!(status, 0, "{out}{err}");
    let next = h.json_in(&proj, &["checkpoint", "create", "a"]);
    assert_eq!(next["name"], "a-2");
    // On the host: golden is as it was, and still the default.
    let shown = h.json_in(&proj, &["checkpoint", "show", "golden"]);
    assert_eq!(shown["node"], golden_node.as_str());
    assert_eq!(shown["default"], true);
    let listed = h.json_in(&proj, &["checkpoint", "ls"]);
    let names: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["golden", "a-1", "a-2"], "{listed}");
    let defaults: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter(|c| c["default"] == true)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(defaults, ["golden"]);
}

#[test]
fn in_box_checkpoints_never_replace_or_become_the_default_root() {
    in_box_checkpoints_never_replace_or_become_the_default(
        "in_box_checkpoints_never_replace_or_become_the_default_root",
        false,
    );
}

#[test]
fn in_box_checkpoints_never_replace_or_become_the_default_rootless() {
    in_box_checkpoints_never_replace_or_become_the_default(
        "in_box_checkpoints_never_replace_or_become_the_default_rootless",
        true,
    );
}
