//! `agentbox config` end to end with the real binary (tier 0), and configuration reaching
//! a new box (tier 2).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{code, stderr, write, Env};
use agentbox_boxes::config::KEYS;

/// A temporary home with a project directory (`proj`, a repository) and a plain one.
struct T {
    env: Env,
}

impl T {
    fn new() -> T {
        let env = Env::new();
        std::fs::create_dir_all(env.path("proj/.git")).expect("mkdir");
        std::fs::create_dir_all(env.path("plain")).expect("mkdir");
        T { env }
    }

    fn home(&self) -> PathBuf {
        self.env.path("home")
    }

    fn proj(&self) -> PathBuf {
        std::fs::canonicalize(self.env.path("proj")).expect("canonicalize")
    }

    fn global_file(&self) -> PathBuf {
        self.home().join("config.yaml")
    }

    fn project_file(&self) -> PathBuf {
        self.home()
            .join("projects")
            .join(agentbox_core::home::project_key(&self.proj()))
            .join("config.yaml")
    }

    /// `agentbox ARGS` run in `dir` (relative to the test directory).
    fn run_in(&self, dir: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbox"));
        cmd.env("AGENTBOX_HOME", self.home())
            .env_remove("VISUAL")
            .env_remove("EDITOR")
            .current_dir(self.env.path(dir))
            .args(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().expect("run agentbox")
    }

    fn ok_in(&self, dir: &str, args: &[&str]) -> String {
        let out = self.run_in(dir, args, &[]);
        assert!(
            out.status.success(),
            "agentbox {args:?} in {dir} failed ({:?}):\n{}",
            out.status,
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json_in(&self, dir: &str, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.ok_in(dir, &a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: bad JSON {e}: {out}"))
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The entry of `key` in `config list --json`.
fn entry<'a>(list: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    list.as_array()
        .expect("a list")
        .iter()
        .find(|e| e["key"] == key)
        .unwrap_or_else(|| panic!("{key} not listed: {list}"))
}

#[test]
fn five_layers_with_show_origin() {
    let t = TestLayers::new();
    let list = t.t.json_in(
        "proj",
        &["config", "list", "--show-origin", "--flag", "box.keep=4"],
    );
    let at = |key: &str| {
        let e = entry(&list, key);
        (
            e["value"].clone(),
            e["origin"].as_str().unwrap_or("").to_owned(),
        )
    };
    assert_eq!(at("box.keep"), (4.into(), "flag".into()));
    assert_eq!(at("box.pids"), (3.into(), "workspace".into()));
    assert_eq!(at("box.cpus"), (2.0.into(), "project".into()));
    assert_eq!(at("box.memory"), ("1G".into(), "global".into()));
    assert_eq!(at("box.network"), ("host".into(), "builtin".into()));
    assert_eq!(
        entry(&list, "box.pids")["file"],
        t.t.proj().join("agentbox.yaml").to_str().expect("utf8")
    );
    assert_eq!(
        entry(&list, "box.cpus")["file"],
        t.t.project_file().to_str().expect("utf8")
    );

    // The human table names the layer and the file.
    let human = t.t.ok_in("proj", &["config", "list", "--show-origin"]);
    let line = |key: &str| {
        human
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{key} missing:\n{human}"))
            .to_owned()
    };
    assert!(line("box.keep").contains("workspace"), "{human}");
    assert!(line("box.pids").contains("agentbox.yaml"), "{human}");
    assert!(
        line("box.cpus").contains(&t.t.project_file().display().to_string()),
        "{human}"
    );
    assert!(line("box.memory").contains("global"), "{human}");
    assert!(line("box.network").contains("builtin"), "{human}");
    let got =
        t.t.ok_in("proj", &["config", "get", "box.cpus", "--show-origin"]);
    assert!(
        got.starts_with("project ") && got.trim_end().ends_with('2'),
        "{got}"
    );

    // Outside the project only the global file and the built-ins count.
    let outside = t.t.json_in("plain", &["config", "list"]);
    assert_eq!(entry(&outside, "box.keep")["value"], 1);
    assert_eq!(entry(&outside, "box.keep")["origin"], "global");
}

/// A home whose four file layers each set some of box.keep, box.pids, box.cpus and
/// box.memory, written through the command line where it can write them.
struct TestLayers {
    t: T,
}

impl TestLayers {
    fn new() -> TestLayers {
        let t = T::new();
        for (k, v) in [
            ("box.keep", "1"),
            ("box.pids", "1"),
            ("box.cpus", "1"),
            ("box.memory", "1G"),
        ] {
            t.ok_in("plain", &["config", "set", k, v]);
        }
        // The project file is untrusted: its box.pids (3) applies because it is lower.
        for (k, v) in [("box.keep", "2"), ("box.pids", "5"), ("box.cpus", "2")] {
            t.ok_in("proj", &["config", "set", k, v]);
        }
        write(
            &t.proj().join("agentbox.yaml"),
            "services:\n  web: {command: npm start}\ndefaults:\n  box:\n    keep: 3\n  box.pids: 3\n",
        );
        assert!(t.global_file().exists() && t.project_file().exists());
        TestLayers { t }
    }
}

#[test]
fn set_get_unset_round_trip_keeps_other_keys() {
    let t = T::new();
    write(
        &t.global_file(),
        "# my settings\nbox:\n  keep: 50\nlater:\n  feature: on\n",
    );
    let out = t.run_in("plain", &["config", "set", "box.network", "none"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not inside a project"),
        "the default target is said: {}",
        stderr(&out)
    );
    assert_eq!(
        t.ok_in("plain", &["config", "get", "box.network"]),
        "none\n"
    );
    assert_eq!(t.ok_in("plain", &["config", "get", "box.keep"]), "50\n");
    let text = read(&t.global_file());
    assert!(text.contains("later") && text.contains("feature"), "{text}");

    // Lists: one argument per item, or one YAML list.
    t.ok_in("plain", &["config", "set", "box.env", "A=1", "B=two words"]);
    assert_eq!(
        t.ok_in("plain", &["config", "get", "box.env"]),
        "A=1\nB=two words\n"
    );
    t.ok_in(
        "plain",
        &["config", "set", "box.ignore", "[dist, 'build/**']"],
    );
    let got = t.json_in("plain", &["config", "get", "box.ignore"]);
    assert_eq!(got["value"], serde_json::json!(["dist", "build/**"]));
    assert_eq!(got["origin"], "global");
    let bad = t.run_in("plain", &["config", "set", "box.env", "NOPE"], &[]);
    assert_eq!(code(&bad), Some(9), "{}", stderr(&bad));

    let set = t.json_in("plain", &["config", "set", "box.memory", "512M"]);
    assert_eq!(set["file"], t.global_file().to_str().expect("utf8"));
    assert_eq!(set["value"], "512M");

    let unset = t.json_in("plain", &["config", "unset", "box.network"]);
    assert_eq!(unset["removed"], true);
    let got = t.json_in("plain", &["config", "get", "box.network"]);
    assert_eq!(
        (&got["value"], &got["origin"]),
        (&"host".into(), &"builtin".into())
    );
    let again = t.json_in("plain", &["config", "unset", "box.network"]);
    assert_eq!(again["removed"], false);
    let text = read(&t.global_file());
    assert!(!text.contains("network"), "{text}");
    assert!(
        text.contains("feature") && text.contains("keep: 50"),
        "{text}"
    );

    // Inside a project the project's file is the default; --global still reaches the other.
    t.ok_in("proj", &["config", "set", "box.keep", "7"]);
    assert!(read(&t.project_file()).contains("keep: 7"));
    t.ok_in("proj", &["config", "set", "--global", "box.keep", "8"]);
    assert!(read(&t.global_file()).contains("keep: 8"));
    assert_eq!(t.ok_in("proj", &["config", "get", "box.keep"]), "7\n");
    assert_eq!(t.ok_in("plain", &["config", "get", "box.keep"]), "8\n");
    // The workspace file is edited by hand.
    let refused = t.run_in(
        "proj",
        &["config", "set", "--workspace", "box.keep", "1"],
        &[],
    );
    assert_eq!(code(&refused), Some(4), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("agentbox.yaml"),
        "{}",
        stderr(&refused)
    );
    let outside = t.run_in(
        "plain",
        &["config", "set", "--project", "box.keep", "1"],
        &[],
    );
    assert_eq!(code(&outside), Some(3), "{}", stderr(&outside));
}

#[test]
fn renamed_keys_fail_naming_the_new_key() {
    let t = T::new();
    write(&t.global_file(), "box:\n  withEnv: true\n");
    let out = t.run_in("plain", &["config", "list"], &[]);
    assert_eq!(code(&out), Some(9), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&t.global_file().display().to_string()),
        "{err}"
    );
    assert!(
        err.contains("box.withEnv") && err.contains("git.withEnv"),
        "{err}"
    );

    write(&t.global_file(), "");
    let out = t.run_in("plain", &["config", "set", "box.envPatterns", ".env"], &[]);
    assert_eq!(code(&out), Some(9), "{}", stderr(&out));
    assert!(stderr(&out).contains("git.envPatterns"), "{}", stderr(&out));
    let out = t.run_in("plain", &["--json", "config", "get", "box.withEnv"], &[]);
    assert_eq!(code(&out), Some(9));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON error");
    assert!(
        v["error"].as_str().unwrap_or("").contains("git.withEnv"),
        "{v}"
    );
}

#[test]
fn unknown_keys_warn_and_commands_still_work() {
    let t = T::new();
    write(
        &t.proj().join("agentbox.yaml"),
        "defaults:\n  box:\n    netwrk: none\n    keep: 5\n",
    );
    let out = t.run_in("proj", &["config", "get", "box.keep"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "5\n");
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains("box.netwrk"),
        "{err}"
    );
    assert!(err.contains("agentbox.yaml"), "{err}");
    assert!(err.contains("did you mean box.network"), "{err}");

    // An unknown key asked for by name: not found, with a suggestion.
    let out = t.run_in("proj", &["config", "get", "box.netwrk"], &[]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("did you mean box.network"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn type_errors_at_set_and_in_files() {
    let t = T::new();
    let out = t.run_in("plain", &["config", "set", "box.keep", "abc"], &[]);
    assert_eq!(code(&out), Some(9), "{}", stderr(&out));
    assert!(stderr(&out).contains("box.keep"), "{}", stderr(&out));
    assert!(!t.global_file().exists(), "nothing written");
    for (k, v) in [
        ("box.network", "bridge"),
        ("box.capture", "maybe"),
        ("box.memory", "lots"),
        ("box.cpus", "-1"),
    ] {
        let out = t.run_in("plain", &["config", "set", k, v], &[]);
        assert_eq!(code(&out), Some(9), "{k} {v}: {}", stderr(&out));
    }

    write(&t.global_file(), "box:\n  capture: true\n  keep: abc\n");
    let out = t.run_in("plain", &["config", "list"], &[]);
    assert_eq!(code(&out), Some(9), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&t.global_file().display().to_string()) && err.contains("box.keep"),
        "{err}"
    );

    write(&t.global_file(), "box:\n  keep: [1\n");
    let out = t.run_in("plain", &["config", "get", "box.keep"], &[]);
    assert_eq!(code(&out), Some(9), "{}", stderr(&out));
    assert!(stderr(&out).contains("line"), "{}", stderr(&out));
}

#[test]
fn config_path_names_every_layer() {
    let t = T::new();
    let p = t.json_in("proj", &["config", "path"]);
    assert_eq!(p["global"], t.global_file().to_str().expect("utf8"));
    assert_eq!(p["project"], t.project_file().to_str().expect("utf8"));
    assert_eq!(
        p["workspace"],
        t.proj().join("agentbox.yaml").to_str().expect("utf8")
    );
    assert_eq!(
        t.ok_in("proj", &["config", "path", "--project"]),
        format!("{}\n", t.project_file().display())
    );
    let outside = t.json_in("plain", &["config", "path"]);
    assert!(outside["project"].is_null() && outside["workspace"].is_null());
    let human = t.ok_in("plain", &["config", "path"]);
    assert!(human.contains("not inside a project"), "{human}");
    // From a sub-directory, the project is the same.
    std::fs::create_dir_all(t.env.path("proj/src/deep")).expect("mkdir");
    let deep = t.json_in("proj/src/deep", &["config", "path"]);
    assert_eq!(deep["project"], p["project"]);
}

#[test]
fn schema_is_json_listing_every_key() {
    let t = T::new();
    let out = t.ok_in("plain", &["config", "schema"]);
    let schema: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(schema["type"], "object");
    for k in KEYS {
        let (section, leaf) = k.name.split_once('.').expect("dotted");
        let s = &schema["properties"][section]["properties"][leaf];
        assert!(s.is_object(), "{} missing from the schema", k.name);
        assert_eq!(s["description"], k.description);
    }
    // Every key is listed too.
    let list = t.json_in("plain", &["config", "list"]);
    assert_eq!(list.as_array().map(Vec::len), Some(KEYS.len()));
}

#[test]
fn edit_runs_the_editor_then_checks() {
    let t = T::new();
    let script = t.env.path("editor.sh");
    write(
        &script,
        "#!/bin/sh\nprintf 'box:\\n  keep: 42\\n' > \"$1\"\n",
    );
    let bad = t.env.path("bad-editor.sh");
    write(
        &bad,
        "#!/bin/sh\nprintf 'box:\\n  keep: lots\\n' > \"$1\"\n",
    );
    for s in [&script, &bad] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(s, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let editor = script.to_str().expect("utf8");
    let out = t.run_in("proj", &["config", "edit"], &[("EDITOR", editor)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = t.json_in("proj", &["config", "get", "box.keep"]);
    assert_eq!(got["value"], 42);
    assert_eq!(got["origin"], "project");

    // VISUAL wins over EDITOR; a bad value is reported with the file and key.
    let out = t.run_in(
        "plain",
        &["config", "edit", "--global"],
        &[("EDITOR", editor), ("VISUAL", bad.to_str().expect("utf8"))],
    );
    assert_eq!(code(&out), Some(9), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("box.keep") && err.contains(&t.global_file().display().to_string()),
        "{err}"
    );
}

/// Tier 2: a configured value reaches a new box when no flag gives it, and a flag wins.
#[test]
fn config_reaches_a_new_box() {
    if !agentbox_testkit::tier::require_root("config_reaches_a_new_box") {
        return;
    }
    let t = T::new();
    t.ok_in("plain", &["config", "set", "box.network", "none"]);
    t.ok_in("plain", &["config", "set", "box.env", "FROM_CONFIG=1"]);
    t.ok_in("plain", &["config", "set", "box.capture", "false"]);
    let proj = t.env.path("ws");
    write(
        &proj.join("agentbox.yaml"),
        "defaults:\n  box:\n    keep: 9\n",
    );
    write(&proj.join("README"), "hello\n");
    let proj = proj.to_str().expect("utf8");

    t.ok_in("plain", &["create", "cfg", "--from", proj]);
    let rec: serde_json::Value =
        serde_json::from_str(&read(&t.home().join("boxes/cfg/box.json"))).expect("record");
    assert_eq!(rec["network"], "none", "{rec}");
    assert_eq!(
        rec["keep"], 9,
        "the workspace layer of --from's project: {rec}"
    );
    assert_eq!(rec["env"], serde_json::json!(["FROM_CONFIG=1"]));
    assert_eq!(rec["capture"], false);
    let status = t.json_in("plain", &["status", "cfg"]);
    assert!(status.to_string().contains("none"), "{status}");

    t.ok_in(
        "plain",
        &[
            "create",
            "flags",
            "--network",
            "host",
            "--capture",
            "--keep",
            "3",
        ],
    );
    let rec: serde_json::Value =
        serde_json::from_str(&read(&t.home().join("boxes/flags/box.json"))).expect("record");
    assert_eq!(rec["network"], "host", "{rec}");
    assert_eq!(rec["capture"], true);
    assert_eq!(rec["keep"], 3);
    assert_eq!(
        rec["env"],
        serde_json::json!(["FROM_CONFIG=1"]),
        "no --env: config"
    );

    let out = t.run_in("plain", &["create", "wrong", "--network", "bridge"], &[]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--network"), "{}", stderr(&out));
    for name in ["cfg", "flags"] {
        t.ok_in("plain", &["destroy", name]);
    }
}

/// `docker.hosts` is a map: one named engine set and unset at a time as
/// `docker.hosts.NAME`, written nested, read whole; a bad name or URL is refused at `set`
/// and leaves the file as it was; an untrusted project file cannot name engines.
#[test]
fn named_docker_hosts_are_set_one_by_one() {
    let t = T::new();
    t.ok_in(
        "plain",
        &["config", "set", "docker.hosts.big", "ssh://me@big"],
    );
    t.ok_in(
        "plain",
        &["config", "set", "docker.hosts.small", "tcp://10.0.0.2:2376"],
    );
    let got = t.json_in("plain", &["config", "get", "docker.hosts"]);
    assert_eq!(
        got["value"],
        serde_json::json!({"big": "ssh://me@big", "small": "tcp://10.0.0.2:2376"})
    );
    assert_eq!(got["type"], "map");
    let file = read(&t.global_file());
    assert!(file.contains("docker:\n  hosts:\n"), "{file}");

    for (key, value, wanted) in [
        ("docker.hosts.bad", "nope", "an engine is a URL"),
        ("docker.hosts.b/ad", "ssh://x", "no config key"),
    ] {
        let out = t.run_in("plain", &["config", "set", key, value], &[]);
        assert!(!out.status.success(), "{key} {value} was taken");
        assert!(stderr(&out).contains(wanted), "{}", stderr(&out));
    }
    assert_eq!(
        read(&t.global_file()),
        file,
        "a refused value wrote nothing"
    );

    t.ok_in("plain", &["config", "unset", "docker.hosts.small"]);
    let got = t.json_in("plain", &["config", "get", "docker.hosts"]);
    assert_eq!(got["value"], serde_json::json!({"big": "ssh://me@big"}));

    // A project file may not choose where a named host goes.
    write(
        &t.env.path("proj/agentbox.yaml"),
        "docker:\n  hosts:\n    big: tcp://evil:2375\n",
    );
    let got = t.json_in("proj", &["config", "get", "docker.hosts"]);
    assert_eq!(got["value"], serde_json::json!({"big": "ssh://me@big"}));
}
