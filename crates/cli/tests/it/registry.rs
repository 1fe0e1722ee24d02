//! The box registry end to end: numbers, ids, display names, the implicit box of a project,
//! `list` per project, `rename`, `destroy --delete-branch` and `prune` (root: real boxes).

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{code, git, kill9, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A home whose box supervisors die with the test.
struct Home {
    env: Env,
}

impl Drop for Home {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

impl Home {
    /// `agentbox ARGS` run in directory `dir`.
    fn run_in(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_agentbox"))
            .env("AGENTBOX_HOME", self.env.path("home"))
            .current_dir(dir)
            .args(args)
            .output()
            .expect("run agentbox")
    }

    fn ok_in(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.run_in(dir, args);
        assert!(
            out.status.success(),
            "agentbox {args:?} in {} failed: {}",
            dir.display(),
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json_in(&self, dir: &Path, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok_in(dir, &a)).expect("JSON")
    }
}

fn repo(path: &Path) {
    write(&path.join("src/lib.rs"), "pub fn f() {}\n");
    git(path, &["init", "-q", "-b", "main"]);
    git(path, &["add", "-A"]);
    git(path, &["commit", "-qm", "first"]);
}

fn setup(test: &str) -> Option<Home> {
    require_root(test).then(|| Home { env: Env::new() })
}

#[test]
fn boxes_are_numbered_per_project_and_found_by_any_reference() {
    let Some(h) = setup("boxes_are_numbered_per_project_and_found_by_any_reference") else {
        return;
    };
    let web = h.env.path("web");
    repo(&web);
    let deep = web.join("src");
    // Made from inside the project, without a name.
    let first = h.json_in(&deep, &["create"]);
    assert_eq!(first["name"], "web-1");
    assert_eq!(first["index"], 1);
    assert_eq!(first["project"], web.to_str().expect("utf-8"));
    assert_eq!(first["provider"], "local");
    let id = first["id"].as_str().expect("id").to_owned();
    assert_eq!(id.len(), 16);
    // The only box of the project needs no name.
    assert_eq!(
        h.ok_in(&deep, &["exec", "--", "cat", "lib.rs"]),
        "pub fn f() {}\n"
    );
    // Commands start in the box's copy of the current directory (or the nearest one the box
    // has).
    assert_eq!(h.ok_in(&deep, &["exec", "pwd"]), "/workspace/src\n");
    std::fs::create_dir_all(web.join("src/new/deeper")).expect("mkdir");
    assert_eq!(
        h.ok_in(&web.join("src/new/deeper"), &["exec", "pwd"]),
        "/workspace/src\n"
    );
    assert_eq!(h.ok_in(&web, &["exec", "pwd"]), "/workspace\n");
    assert!(
        h.run_in(&deep, &["exec", "nope", "--", "true"])
            .status
            .code()
            == Some(3)
    );

    let second = h.json_in(&web, &["create", "--no-carry"]);
    assert_eq!(second["name"], "web-2");
    assert_eq!(second["index"], 2);
    // Now the box has to be named: the error lists both.
    let out = h.run_in(&deep, &["exec", "--", "true"]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("web-1") && stderr(&out).contains("web-2"),
        "{}",
        stderr(&out)
    );
    // Number, id, id prefix, name.
    for r in ["1", id.as_str(), &id[..6], "web-1"] {
        h.ok_in(
            &deep,
            &[
                "exec",
                r,
                "--",
                "touch",
                &format!("/workspace/by-{}", r.len()),
            ],
        );
    }
    let files = h.ok_in(&web, &["exec", "1", "--", "ls", "/workspace"]);
    assert!(
        files.contains("by-1") && files.contains("by-16") && files.contains("by-6"),
        "{files}"
    );
    // Numbers belong to the project: outside it, 1 is nobody.
    let outside = h.env.path("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    assert_eq!(
        code(&h.run_in(&outside, &["exec", "1", "--", "true"])),
        Some(3)
    );
    assert_eq!(
        h.ok_in(&outside, &["exec", "web-2", "--", "echo", "ok"]),
        "ok\n"
    );

    // Display names resolve (after names and ids) and show in the list.
    h.ok_in(&web, &["rename", "2", "fix login"]);
    assert_eq!(
        h.ok_in(&outside, &["exec", "fix login", "--", "echo", "ok"]),
        "ok\n"
    );
    let list = h.json_in(&web, &["list"]);
    let shown: Vec<_> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|r| {
            (
                r["box"]["index"].as_u64(),
                r["box"]["display_name"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![(Some(1), None), (Some(2), Some("fix login".to_owned()))]
    );
    assert!(h.ok_in(&web, &["list"]).contains("fix login"));
    // A display name may not be another box's name, nor a number; a shared one is ambiguous.
    assert_eq!(code(&h.run_in(&web, &["rename", "1", "web-2"])), Some(2));
    assert_eq!(code(&h.run_in(&web, &["rename", "1", "7"])), Some(2));
    h.ok_in(&web, &["rename", "1", "fix login"]);
    let out = h.run_in(&web, &["exec", "fix login", "--", "true"]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("more than one box"),
        "{}",
        stderr(&out)
    );
    h.ok_in(&web, &["rename", "1", ""]);
    assert_eq!(
        h.json_in(&web, &["status", "1"])["box"]["display_name"],
        serde_json::Value::Null
    );

    // The agent last started is remembered.
    let fake_agent = "#!/bin/sh\necho agent ran\n";
    h.ok_in(
        &web,
        &[
            "exec",
            "1",
            "--",
            "sh",
            "-c",
            &format!("printf '{fake_agent}' > /usr/local/bin/codex; chmod +x /usr/local/bin/codex"),
        ],
    );
    assert_eq!(h.ok_in(&web, &["exec", "1", "--", "codex"]), "agent ran\n");
    assert_eq!(
        h.json_in(&web, &["status", "1"])["box"]["last_agent"],
        "codex"
    );

    // Another project's boxes are not listed here, but are with --all.
    let api = h.env.path("api");
    repo(&api);
    assert_eq!(h.json_in(&api, &["create"])["name"], "api-1");
    assert_eq!(h.json_in(&web, &["list"]).as_array().map(Vec::len), Some(2));
    assert_eq!(
        h.json_in(&web, &["list", "--all"]).as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        h.json_in(&outside, &["list"]).as_array().map(Vec::len),
        Some(3)
    );
    // The home knows every project: those with boxes, and one with only a configuration.
    let docs = h.env.path("docs");
    repo(&docs);
    h.ok_in(&docs, &["config", "set", "box.keep", "5"]);
    let projects = h.json_in(&outside, &["config", "list-projects"]);
    let seen: Vec<(String, u64, u64, bool)> = projects
        .as_array()
        .expect("projects")
        .iter()
        .map(|p| {
            (
                p["root"].as_str().unwrap_or_default().to_owned(),
                p["boxes"].as_u64().unwrap_or(99),
                p["next_index"].as_u64().unwrap_or(99),
                p["config"].is_string(),
            )
        })
        .collect();
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    assert_eq!(
        seen,
        vec![
            (path(&api), 1, 2, false),
            (path(&docs), 0, 1, true),
            (path(&web), 2, 3, false),
        ]
    );

    // Numbers are never reused.
    h.ok_in(&web, &["destroy", "2"]);
    let third = h.json_in(&web, &["create"]);
    assert_eq!(third["index"], 3, "{third}");
    assert_eq!(third["name"], "web-3");
    // Destroy needs a name, even with one box left in a project.
    assert_eq!(code(&h.run_in(&api, &["destroy"])), Some(2));
    // --delete-branch takes the branch too; without it the branch stays.
    h.ok_in(&api, &["destroy", "1", "--delete-branch"]);
    assert_eq!(git(&api, &["branch", "--list", "agentbox/*"]), "");
    h.ok_in(&web, &["destroy", "web-1"]);
    assert!(git(&web, &["branch", "--list", "agentbox/*"]).contains("agentbox/web-1"));
    assert_eq!(git(&web, &["for-each-ref", "refs/agentbox/web-1"]), "");
}

#[test]
fn status_shows_branches_ahead_behind_and_dirty_files() {
    let Some(h) = setup("status_shows_branches_ahead_behind_and_dirty_files") else {
        return;
    };
    let web = h.env.path("web");
    repo(&web);
    h.ok_in(&web, &["create", "work"]);
    h.ok_in(
        &web,
        &["exec", "--", "sh", "-c", "echo a > a.txt && git add a.txt && git commit -qm a && echo b > b.txt && echo more >> src/lib.rs"],
    );
    write(&web.join("host.txt"), "h\n");
    git(&web, &["add", "host.txt"]);
    git(&web, &["commit", "-qm", "host moves on"]);
    let st = h.json_in(&web, &["status"]);
    let br = &st["box"]["branches"][0];
    assert_eq!(br["branch"], "agentbox/work");
    assert_eq!(br["against"], "main");
    assert_eq!(
        (br["ahead"].as_u64(), br["behind"].as_u64()),
        (Some(1), Some(1)),
        "{st}"
    );
    let mut dirty: Vec<&str> = br["dirty"]
        .as_array()
        .expect("dirty")
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    dirty.sort();
    assert_eq!(dirty, vec!["b.txt", "src/lib.rs"]);
    let usage = h.json_in(&web, &["status", "--usage"]);
    assert!(
        usage["env"]["disk_bytes"].as_u64().is_some_and(|b| b > 0),
        "{usage}"
    );
    let human = h.ok_in(&web, &["status"]);
    assert!(
        human.contains("1 ahead, 1 behind main, 2 paths not committed to git"),
        "{human}"
    );
    // An agentbox commit is a snapshot: the status says which commit makes a git commit.
    assert!(
        human.contains("are not git commits; `agentbox exec -- git commit"),
        "{human}"
    );
}

#[test]
fn prune_removes_what_boxes_left_behind() {
    let Some(h) = setup("prune_removes_what_boxes_left_behind") else {
        return;
    };
    let web = h.env.path("web");
    repo(&web);
    h.ok_in(&web, &["create", "keep-me"]);
    h.ok_in(&web, &["create", "doomed"]);
    h.ok_in(&web, &["exec", "keep-me", "--", "true"]);
    h.ok_in(&web, &["exec", "doomed", "--", "true"]);
    // Supervisors killed outright leave their files; one box loses its directory too.
    for name in ["keep-me", "doomed"] {
        let info: serde_json::Value = serde_json::from_slice(
            &std::fs::read(h.env.path(&format!("home/boxes/{name}/supervisor.json")))
                .expect("info"),
        )
        .expect("json");
        kill9(info["pid"].as_i64().expect("pid") as i32);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::remove_dir_all(h.env.path("home/boxes/doomed")).expect("rm");
    // A directory without a record; and refs of a box of another agentbox home that uses
    // the same repository, which are not this home's to remove.
    std::fs::create_dir_all(h.env.path("home/boxes/ghost-box/logs")).expect("mkdir");
    git(
        &web,
        &["update-ref", "refs/agentbox/elsewhere/base", "HEAD"],
    );

    // Young leftovers are left alone by default (a create may be running).
    let dry = h.json_in(&web, &["prune", "--dry-run"]);
    assert!(
        dry.as_array()
            .expect("rows")
            .iter()
            .all(|r| r["kind"] != "environment" && r["kind"] != "record"),
        "{dry}"
    );
    let dry = h.json_in(&web, &["prune", "--dry-run", "--min-age", "0"]);
    let kinds = |v: &serde_json::Value| {
        let mut k: Vec<String> = v
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                format!(
                    "{} {}",
                    r["kind"].as_str().unwrap_or(""),
                    r["outcome"].as_str().unwrap_or("")
                )
            })
            .collect();
        k.sort();
        k
    };
    let found = kinds(&dry);
    for want in [
        "environment would remove",
        "record would remove",
        "pin would remove",
        "supervisor would remove",
    ] {
        assert!(
            found.iter().any(|f| f == want),
            "{want} missing from {found:?}"
        );
    }
    assert!(!format!("{dry}").contains("elsewhere"), "{dry}");
    // The dry run changed nothing.
    assert!(h.env.path("home/boxes/ghost-box").exists());
    assert!(git(&web, &["for-each-ref", "refs/agentbox/doomed"]).contains("doomed"));

    let done = h.json_in(&web, &["prune", "--min-age", "0"]);
    assert!(
        kinds(&done).iter().all(|k| k.ends_with("removed")),
        "{done}"
    );
    assert!(!h.env.path("home/boxes/ghost-box").exists());
    assert!(git(&web, &["for-each-ref", "refs/agentbox/elsewhere"]).contains("elsewhere"));
    assert!(!h.env.path("home/boxes/keep-me/supervisor.json").exists());
    // The pin of the box that was destroyed half-way goes; the live box's stays.
    assert_eq!(git(&web, &["for-each-ref", "refs/agentbox/doomed"]), "");
    assert!(git(&web, &["for-each-ref", "refs/agentbox/keep-me"]).contains("keep-me"));
    assert_eq!(
        h.json_in(&web, &["prune", "--dry-run", "--min-age", "0"]),
        serde_json::json!([])
    );
    // The surviving box starts again and kept its history.
    assert_eq!(
        h.ok_in(&web, &["exec", "keep-me", "--", "echo", "back"]),
        "back\n"
    );
    assert_eq!(h.json_in(&web, &["list"]).as_array().map(Vec::len), Some(1));
}
