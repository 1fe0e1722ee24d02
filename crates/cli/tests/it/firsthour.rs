//! What a new user met in the first hour with the CLI (issue 32): `exec --json` whose
//! stdout did not parse, usage lines that asked for `--home`, a misleading error outside a
//! project, `session ls`, `gc --dry-run`.

use std::path::{Path, PathBuf};

use crate::common::{code, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A small project (not a git repository) to make boxes of.
fn project(root: &Path) -> PathBuf {
    let p = root.join("proj");
    write(&p.join("README"), "readme\n");
    p
}

/// A home with one box `b` (`None`: the root-tier test is skipped).
fn with_box(test: &str) -> Option<Env> {
    if !require_root(test) {
        return None;
    }
    let env = Env::new();
    let proj = project(env.home.path());
    env.ok(&["create", "b", "--from", proj.to_str().expect("utf-8 path")]);
    Some(env)
}

struct Supervisors<'a>(&'a Env);

impl Drop for Supervisors<'_> {
    fn drop(&mut self) {
        crate::common::kill_supervisors(&self.0.path("home"));
    }
}

#[test]
fn exec_json_stdout_is_one_json_document_and_the_output_goes_to_stderr() {
    let Some(env) = with_box("exec_json_stdout_is_one_json_document") else {
        return;
    };
    let _s = Supervisors(&env);
    let out = env.run(&[
        "--json",
        "exec",
        "b",
        "--",
        "sh",
        "-c",
        "echo to-stdout; echo to-stderr >&2; echo x > /workspace/made; exit 3",
    ]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {stdout}"));
    assert_eq!(v["status"], 3, "{v}");
    assert!(!stdout.contains("to-stdout"), "{stdout}");
    let err = stderr(&out);
    assert!(
        err.contains("to-stdout") && err.contains("to-stderr"),
        "the command's output is on stderr: {err}"
    );
    // Without --json the command's stdout is stdout, as before.
    let plain = env.ok(&["exec", "b", "--", "echo", "plain"]);
    assert_eq!(plain, "plain\n");
    // And a later command's JSON goes to stdout again (the redirection ended).
    let help = env.ok(&["exec", "--help"]);
    assert!(help.contains("--json"), "{help}");
}

#[test]
fn usage_errors_do_not_list_home_as_required() {
    let env = Env::new();
    // Env::command sets AGENTBOX_HOME, as a user's shell may.
    for args in [&["import"][..], &["checkpoint", "import"][..]] {
        let out = env.run(args);
        assert_eq!(code(&out), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("Usage: agentbox"), "{err}");
        assert!(!err.contains("--home"), "{args:?}: {err}");
    }
    let help = env.ok(&["import", "--help"]);
    let dir_line = help
        .lines()
        .find(|l| l.trim_start().starts_with("--dir"))
        .unwrap_or_else(|| panic!("no --dir line: {help}"));
    assert!(dir_line.contains("required"), "{dir_line}");
}

#[test]
fn outside_a_project_the_error_says_so() {
    let env = Env::new();
    // The temporary home is not in a git repository, and there are no boxes.
    for args in [
        &["exec", "--", "ls"][..],
        &["exec", "ls"][..],
        &["shell", "ls"][..],
        &["ps"][..],
        &["stop"][..],
    ] {
        let out = env.run(args);
        let err = stderr(&out);
        assert_eq!(code(&out), Some(2), "{args:?}: {err}");
        assert!(err.contains("is not in a project"), "{args:?}: {err}");
        assert!(!err.contains("no box named"), "{args:?}: {err}");
        assert!(err.contains("agentbox exec BOX -- CMD"), "{args:?}: {err}");
    }
    // `exec NAME -- CMD` with NAME no box is still about the box.
    let out = env.run(&["exec", "nope", "--", "ls"]);
    assert!(
        stderr(&out).contains("no box named \"nope\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn session_ls_lists_the_sessions() {
    let Some(env) = with_box("session_ls_lists_the_sessions") else {
        return;
    };
    let _s = Supervisors(&env);
    env.ok(&[
        "session", "start", "b", "--name", "sleeper", "-d", "--", "sleep", "60",
    ]);
    let listed = env.json(&["sessions", "b"]);
    for alias in ["ls", "list"] {
        let got = env.json(&["session", alias, "b"]);
        assert_eq!(got, listed, "session {alias}");
    }
    assert!(listed.to_string().contains("sleeper"), "{listed}");
}

#[test]
fn gc_dry_run_lists_what_gc_removes_and_removes_nothing() {
    let Some(env) = with_box("gc_dry_run_lists_what_gc_removes") else {
        return;
    };
    let _s = Supervisors(&env);
    env.ok(&["exec", "b", "--", "sh", "-c", "echo 1 > /workspace/one"]);
    env.ok(&["destroy", "b"]);
    let dry = env.json(&["gc", "--dry-run"]);
    assert_eq!(dry["dry_run"], true, "{dry}");
    let nodes = dry["removed_nodes"].as_array().expect("nodes").clone();
    let layers = dry["removed_layers"].as_array().expect("layers").clone();
    assert!(!nodes.is_empty() && !layers.is_empty(), "{dry}");
    // Nothing was removed: a second dry run finds the same.
    let again = env.json(&["gc", "--dry-run"]);
    assert_eq!(again["removed_nodes"], dry["removed_nodes"]);
    assert_eq!(again["removed_layers"], dry["removed_layers"]);
    let human = env.ok(&["gc", "--dry-run"]);
    assert!(human.contains("nothing removed"), "{human}");
    // The real gc removes exactly what the dry run listed.
    let real = env.json(&["gc"]);
    assert_eq!(real["removed_nodes"].as_array().expect("nodes"), &nodes);
    assert_eq!(real["removed_layers"].as_array().expect("layers"), &layers);
    let after = env.json(&["gc", "--dry-run"]);
    assert_eq!(after["removed_layers"], serde_json::json!([]), "{after}");
}
