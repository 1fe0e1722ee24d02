//! An agent's configuration and credentials on their way into a box: a user-defined agent,
//! Claude's sanitised configuration, a saved login token, a detached launch, each box's own
//! copy (also rootless).

use std::path::PathBuf;

use crate::common::{kill_supervisors, write};
use agentbox_testkit::tier::{require_root, require_tool};

use super::*;

#[test]
fn a_user_defined_agent_gets_its_configuration_and_variables_and_a_box() {
    let Some(s) = Setup::new("a_user_defined_agent_gets_its_configuration_and_variables_and_a_box")
    else {
        return;
    };
    write(&s.user.join(".myagent/conf"), "host conf\n");
    write(
        &s.user.join(".myagent/sessions/old.log"),
        "host transcript\n",
    );
    write(&s.user.join(".myagent/token"), "sk-never-in-a-box\n");
    write(
        &s.env.path("home/agents.yaml"),
        "myagent:\n  command: [sh, -c, 'cat ~/.myagent/conf; echo \"key=$MY_KEY\"; echo \"args=$*\"', sh]\n  skip_permissions: [--yes-all]\n  config:\n    - path: ~/.myagent\n      exclude: [sessions, token]\n  env: [MY_KEY]\n",
    );
    let listed = s.ok(&["--json", "agents"], &[]);
    assert!(listed.contains("\"myagent\""), "{listed}");
    let out = s.ok(
        &["agent", "myagent", "--", "one", "two"],
        &[("MY_KEY", "k-123")],
    );
    assert_eq!(out, "host conf\nkey=k-123\nargs=--yes-all one two\n");
    let boxes = s.env.json(&["list", "--all"]);
    let rows = boxes.as_array().expect("rows");
    assert_eq!(rows.len(), 1, "a box was made for the agent: {boxes}");
    let name = rows[0]["name"].as_str().expect("name").to_owned();
    assert_eq!(rows[0]["box"]["last_agent"], "myagent");
    // Excluded files never enter the box; the variable reaches the agent only.
    let inside = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "ls -A /root/.myagent; echo \"exec key=${MY_KEY:-unset}\"; grep -rl sk-never-in-a-box /root /workspace /run/agentbox 2>/dev/null; true",
        ],
        &[("MY_KEY", "k-123")],
    );
    assert_eq!(inside, "conf\nexec key=unset\n");
    // The box's changes never reach the host; the host's win on the next launch; box-only
    // files stay.
    s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "echo box edit > /root/.myagent/conf; echo mine > /root/.myagent/box-only",
        ],
        &[],
    );
    assert_eq!(read(&s.user.join(".myagent/conf")), "host conf\n");
    write(&s.user.join(".myagent/conf"), "host conf v2\n");
    let again = s.ok(&["agent", "myagent", "--ask"], &[]);
    assert_eq!(
        again, "host conf v2\nkey=\nargs=\n",
        "--ask keeps the prompts: no skip arguments"
    );
    assert_eq!(
        s.ok(
            &["exec", &name, "--", "cat", "/root/.myagent/box-only"],
            &[]
        ),
        "mine\n"
    );
    // The same box again, unless --new.
    s.ok(&["agent", "myagent", "--new"], &[]);
    let boxes = s.env.json(&["list", "--all"]);
    assert_eq!(boxes.as_array().map(Vec::len), Some(2));
    let unknown = s.run(&["agent", "nosuch"], &[]);
    assert_eq!(unknown.status.code(), Some(3));
}

#[test]
fn claudes_configuration_is_sanitised_and_its_credentials_stay_home() {
    let Some(s) = Setup::new("claudes_configuration_is_sanitised_and_its_credentials_stay_home")
    else {
        return;
    };
    if !require_tool(
        "claudes_configuration_is_sanitised_and_its_credentials_stay_home",
        "claude",
    ) {
        return;
    }
    let proj = std::fs::canonicalize(&s.proj).expect("canonical");
    let user = s.user.to_string_lossy().into_owned();
    write(
        &s.user.join(".claude.json"),
        &format!(
            r#"{{"installMethod":"native","projects":{{"{}":{{"hasTrustDialogAccepted":true,"mcpServers":{{"db":{{"command":"npx"}}}}}}}}}}"#,
            proj.display()
        ),
    );
    write(
        &s.user.join(".claude/settings.json"),
        &format!(
            r#"{{"model":"opus","hooks":{{"Stop":[{{"hooks":[{{"type":"command","command":"{user}/bin/cc-status"}}]}}],"PreToolUse":[{{"matcher":"Bash","hooks":[{{"type":"command","command":"echo ok"}}]}}]}}}}"#
        ),
    );
    write(
        &s.user.join(".claude/.credentials.json"),
        "{\"token\":\"sk-ant-host-secret\"}",
    );
    write(&s.user.join(".claude/agents/reviewer.md"), "# reviewer\n");
    write(
        &s.user.join(".claude/plugins/p/node_modules/x.node"),
        "darwin binary",
    );
    let version = s.ok(&["claude", "--", "--version"], &[]);
    assert!(version.contains("Claude Code"), "{version}");
    let name = s.only_box();
    let sh = |script: &str| s.ok(&["exec", &name, "--", "sh", "-c", script], &[]);
    let json: serde_json::Value =
        serde_json::from_str(&sh("cat /root/.claude.json")).expect("json");
    assert!(json.get("installMethod").is_none(), "{json}");
    assert_eq!(
        json["projects"]["/workspace"]["hasTrustDialogAccepted"],
        true
    );
    assert_eq!(
        json["projects"]["/workspace"]["mcpServers"]["db"]["command"],
        "npx"
    );
    let settings: serde_json::Value =
        serde_json::from_str(&sh("cat /root/.claude/settings.json")).expect("json");
    assert!(settings["hooks"].get("Stop").is_none(), "{settings}");
    assert_eq!(
        settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
        "echo ok"
    );
    assert_eq!(sh("cat /root/.claude/agents/reviewer.md"), "# reviewer\n");
    assert_eq!(
        sh("ls /root/.claude/.credentials.json /root/.claude/plugins/p/node_modules 2>&1 | grep -c 'No such' ; grep -rl sk-ant-host-secret /root /run/agentbox 2>/dev/null; true"),
        "2\n"
    );
    // The host's files are as they were.
    assert!(read(&s.user.join(".claude.json")).contains("installMethod"));
}

#[test]
fn login_saves_a_token_the_agent_gets_and_no_box_sees() {
    let Some(s) = Setup::new("login_saves_a_token_the_agent_gets_and_no_box_sees") else {
        return;
    };
    write(
        &s.env.path("home/agents.yaml"),
        "tok:\n  command: [sh, -c, 'echo \"token=$TOK_VAR\"']\n  login: [sh, -c, 'echo set-up ran']\n  login_var: TOK_VAR\n",
    );
    let mut c = s.env.command(&["agent", "tok", "login"]);
    c.current_dir(&s.proj)
        .env("HOME", &s.user)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"tok-saved-5150\n")
            .expect("write");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("set-up ran"));
    let file = s.env.path("home/credentials/tok.token");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file)
            .expect("saved")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(s.ok(&["agent", "tok"], &[]), "token=tok-saved-5150\n");
    // The shell's own value wins; no box command sees the saved one.
    assert_eq!(
        s.ok(&["agent", "tok"], &[("TOK_VAR", "from-shell")]),
        "token=from-shell\n"
    );
    let name = s.only_box();
    let seen = s.ok(
        &["exec", &name, "--", "sh", "-c", "echo ${TOK_VAR:-unset}; grep -rl tok-saved-5150 /root /workspace /run /tmp /etc 2>/dev/null; true"],
        &[],
    );
    assert_eq!(seen, "unset\n");
}

#[test]
fn a_detached_agent_runs_in_a_session_of_its_box() {
    let Some(s) = Setup::new("a_detached_agent_runs_in_a_session_of_its_box") else {
        return;
    };
    write(
        &s.env.path("home/agents.yaml"),
        "sleeper:\n  command: [sleep, '30']\n",
    );
    let out = s.ok(&["--json", "agent", "sleeper", "-d"], &[]);
    let started: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(started["name"], "sleep");
    let name = s.only_box();
    let sessions = s.env.json(&["sessions", &name]);
    let listed = sessions.as_array().expect("sessions");
    assert_eq!(listed.len(), 1, "{sessions}");
    assert_eq!(listed[0]["name"], "sleep");
    assert!(listed[0]["exit"].is_null(), "still running: {sessions}");
}

#[test]
fn each_box_keeps_its_own_copy_of_an_agents_configuration() {
    let Some(s) = Setup::new("each_box_keeps_its_own_copy_of_an_agents_configuration") else {
        return;
    };
    write(&s.user.join(".myagent/conf"), "host conf\n");
    write(
        &s.env.path("home/agents.yaml"),
        "myagent:\n  command: [cat, /root/.myagent/conf]\n  config:\n    - path: ~/.myagent\n",
    );
    let names = |s: &Setup| -> Vec<String> {
        s.env
            .json(&["list", "--all"])
            .as_array()
            .expect("rows")
            .iter()
            .map(|b| b["name"].as_str().expect("name").to_owned())
            .collect()
    };
    let sh = |name: &str, script: &str| s.ok(&["exec", name, "--", "sh", "-c", script], &[]);
    assert_eq!(s.ok(&["agent", "myagent"], &[]), "host conf\n");
    let one = names(&s)[0].clone();
    assert_eq!(
        sh(&one, "test -L /root/.myagent && echo link; echo from one > /root/.myagent/history; test -e /run/agentbox/agent-home && echo shared; true"),
        ""
    );
    // What the agent keeps in one box stays there; the host never sees it.
    s.ok(&["agent", "myagent", "--new"], &[]);
    let two = names(&s)
        .into_iter()
        .find(|n| *n != one)
        .expect("a second box");
    assert_eq!(
        sh(&two, "cat /root/.myagent/history 2>&1 >/dev/null | wc -l"),
        "1\n"
    );
    assert!(!s.user.join(".myagent/history").exists());
    // The host's changes reach both on their next launch; each keeps its own files.
    write(&s.user.join(".myagent/conf"), "host conf v2\n");
    assert_eq!(s.ok(&["agent", "myagent", &one], &[]), "host conf v2\n");
    assert_eq!(sh(&one, "ls /root/.myagent"), "conf\nhistory\n");
    // --isolate-config is still accepted (it is what every box does).
    s.ok(&["agent", "myagent", "--new", "--isolate-config"], &[]);
    assert_eq!(names(&s).len(), 3);
    assert!(!s.env.path("home/agent-home").exists());
}

#[test]
fn a_rootless_box_keeps_its_own_copy_too() {
    if !require_root("a_rootless_box_keeps_its_own_copy_too") {
        return;
    }
    let dir = PathBuf::from(format!("/srv/agentbox-agents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (user, home, proj) = (dir.join("user"), dir.join("abhome"), dir.join("proj"));
    write(&user.join(".myagent/conf"), "host conf\n");
    write(&proj.join("README"), "readme\n");
    write(
        &home.join("agents.yaml"),
        "myagent:\n  command: [cat, /root/.myagent/conf]\n  config:\n    - path: ~/.myagent\n",
    );
    std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), dir.join("agentbox")).expect("copy");
    crate::common::chown_nobody(&dir);
    let run = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(dir.join("agentbox"))
            .args(args)
            .env("AGENTBOX_HOME", &home)
            .env("HOME", &user)
            .current_dir(&proj)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["create", "rl", "--from", &proj.to_string_lossy()]);
    assert_eq!(run(&["agent", "myagent", "rl"]), "host conf\n");
    assert_eq!(
        run(&[
            "exec",
            "rl",
            "--",
            "sh",
            "-c",
            "test -L /root/.myagent && echo link; echo kept > /root/.myagent/history; cat /root/.myagent/history"
        ]),
        "kept\n"
    );
    assert!(!home.join("agent-home").exists(), "no copy outside the box");
    let _ = run(&["stop", "rl"]);
    kill_supervisors(&home);
    let _ = std::fs::remove_dir_all(&dir);
}
