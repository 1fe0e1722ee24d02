//! Agents in boxes (root): the catalogue as data, configuration synced in (sanitised, never
//! back, credentials never), variables for the agent only, the box made when needed; and the
//! real Claude Code CLI when the machine has it.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_testkit::tier::{require_root, require_tool};

struct Setup {
    env: Env,
    /// The host user's home the agents' configuration comes from.
    user: PathBuf,
    proj: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        if !require_root(test) {
            return None;
        }
        let env = Env::new();
        let user = env.home.path().join("user");
        let proj = env.home.path().join("proj");
        write(&proj.join("a.txt"), "a\n");
        git(&proj, &["init", "-q", "-b", "main"]);
        git(&proj, &["add", "-A"]);
        git(&proj, &["commit", "-qm", "first"]);
        Some(Setup { env, user, proj })
    }

    /// Run agentbox in the project, as the host user whose home is `self.user`.
    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut c = self.env.command(args);
        c.current_dir(&self.proj).env("HOME", &self.user);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().expect("run agentbox")
    }

    /// Run the agent command `args` against the model-API stub `stub` (which logs to
    /// `seen`), which is stopped after: the agent must succeed and print the stub's streamed
    /// answer. Returns what the stub saw.
    fn answer_from_stub(
        &self,
        mut stub: std::process::Child,
        seen: &Path,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> String {
        let out = self.run(args, vars);
        let seen_text = std::fs::read_to_string(seen).unwrap_or_default();
        let _ = stub.kill();
        let _ = stub.wait();
        assert!(
            out.status.success(),
            "{}\nstub saw: {seen_text}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Hello from the stub"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        seen_text
    }

    /// The test's only box.
    fn only_box(&self) -> String {
        self.env.json(&["list", "--all"])[0]["name"]
            .as_str()
            .expect("name")
            .to_owned()
    }

    fn ok(&self, args: &[&str], vars: &[(&str, &str)]) -> String {
        let out = self.run(args, vars);
        assert!(
            out.status.success(),
            "agentbox {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The loopback stub of the model APIs (`messages_stub.py`), and its port.
fn start_stub(seen: &Path) -> (std::process::Child, String) {
    let mut stub = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/messages_stub.py"
        ))
        .arg(seen)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the stub");
    let port = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stub.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("the stub's port");
        line.trim().to_owned()
    };
    if port.parse::<u16>().is_err() {
        let _ = stub.kill();
        let _ = stub.wait();
        panic!("the stub did not start (it printed {port:?})");
    }
    (stub, port)
}

/// A key no box may hold, and a search of box `name` for it (its processes' environments and
/// files): the count of matches, then the files that hold it.
fn search_box_for(s: &Setup, name: &str, key: &str) -> String {
    // Searched for in two halves, so the search's own command line cannot match.
    let (a, b) = key.split_at(key.len() / 2);
    s.ok(
        &[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            &format!(
                "k=\"{a}\"\"{b}\"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c \"$k\"; grep -rl \"$k\" /root /workspace /run /tmp /etc 2>/dev/null; true"
            ),
        ],
        &[],
    )
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read")
}

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

/// The acceptance test of brokered credentials: the real Claude Code CLI runs `claude -p`
/// in a box against a loopback stub of the Messages API; the stub sees the host's real key,
/// the answer it streams is printed, and the box holds no trace of the key.
#[test]
fn claude_answers_through_the_broker_and_the_key_never_enters_the_box() {
    let test = "claude_answers_through_the_broker_and_the_key_never_enters_the_box";
    let Some(s) = Setup::new(test) else {
        return;
    };
    if !require_tool(test, "claude") || !require_tool(test, "python3") {
        return;
    }
    let seen = s.env.path("seen.log");
    let (stub, port) = start_stub(&seen);
    let url = format!("http://127.0.0.1:{port}");
    s.env.ok(&[
        "config",
        "set",
        "--global",
        "broker.anthropicUpstream",
        &url,
    ]);
    let key = format!(
        "sk-ant-real-{}{}",
        agentbox_core::id::new_id(),
        agentbox_core::id::new_id()
    );
    let seen_text = s.answer_from_stub(
        stub,
        &seen,
        &["claude", "--", "-p", "say hi"],
        &[
            ("ANTHROPIC_API_KEY", key.as_str()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ],
    );
    assert!(
        seen_text.contains(&format!("key={key}")),
        "the stub saw: {seen_text}"
    );
    let name = s.only_box();
    let found = search_box_for(&s, &name, &key);
    assert_eq!(found, "0\n", "the key is in the box: {found}");
    // Claude wrote its state into the box's own copy: nothing of it is outside the box.
    let kinds = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "test -d /root/.claude && ! test -L /root/.claude && echo dir; test -f /root/.claude.json && echo file",
        ],
        &[],
    );
    assert_eq!(kinds, "dir\nfile\n");
    assert!(!s.env.path("home/agent-home").exists());
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
fn codex_answers_through_the_broker_with_its_configuration_sanitised() {
    let test = "codex_answers_through_the_broker_with_its_configuration_sanitised";
    let Some(s) = Setup::new(test) else {
        return;
    };
    if !require_tool(test, "codex") || !require_tool(test, "python3") {
        return;
    }
    // The host's Codex configuration, with what never belongs in a box.
    let user = s.user.to_string_lossy().into_owned();
    write(
        &s.user.join(".codex/config.toml"),
        &format!(
            "model = \"gpt-stub\"\nnotify = [\"{user}/bin/notify\"]\n\n[mcp_servers.hostonly]\ncommand = \"{user}/bin/mcp\"\n\n[mcp_servers.portable]\ncommand = \"npx\"\nargs = [\"some-mcp\"]\n"
        ),
    );
    write(
        &s.user.join(".codex/auth.json"),
        r#"{"OPENAI_API_KEY":"sk-file-never"}"#,
    );
    write(
        &s.user.join(".codex/sessions/2026/rollout.jsonl"),
        "host transcript\n",
    );
    write(&s.user.join(".codex/state_5.sqlite"), "host threads\n");
    write(&s.user.join(".codex/AGENTS.md"), "house rules\n");
    write(&s.user.join(".agents/skills/review/SKILL.md"), "a skill\n");
    let seen = s.env.path("seen.log");
    let (stub, port) = start_stub(&seen);
    s.env.ok(&[
        "config",
        "set",
        "--global",
        "broker.openaiUpstream",
        &format!("http://127.0.0.1:{port}"),
    ]);
    let key = format!("sk-proj-real-{}", agentbox_core::id::new_id());
    let seen_text = s.answer_from_stub(
        stub,
        &seen,
        &["codex", "--", "exec", "--skip-git-repo-check", "say hi"],
        &[("OPENAI_API_KEY", key.as_str())],
    );
    assert!(
        seen_text.contains(&format!("auth=Bearer {key}")),
        "the stub saw: {seen_text}"
    );
    let name = s.only_box();
    assert_eq!(search_box_for(&s, &name, &key), "0\n");
    let inside = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            // Codex's own sessions and databases of this run are the box's; the host's never
            // come in.
            "cd /root/.codex && ls -A | sort | tr '\\n' ' '; grep -rl -e 'host transcript' -e 'host threads' . | tr '\\n' ' '; echo; cat config.toml; cat /root/.agents/skills/review/SKILL.md",
        ],
        &[],
    );
    let (listing, rest) = inside.split_once('\n').expect("lines");
    assert!(!listing.split(' ').any(|f| f == "auth.json"), "{listing}");
    assert!(
        !listing.contains("./"),
        "the host's history is in the box: {listing}"
    );
    assert!(listing.contains("AGENTS.md"), "{listing}");
    assert!(
        !rest.contains("bin/notify") && !rest.contains("hostonly"),
        "{rest}"
    );
    assert!(rest.contains("portable"), "{rest}");
    assert!(rest.contains("/workspace"), "/workspace is trusted: {rest}");
    assert!(rest.contains("a skill"), "{rest}");
    assert!(!read(&s.user.join(".codex/config.toml")).contains("/workspace"));
}

#[test]
fn opencode_answers_with_its_configuration_and_without_its_credentials() {
    let test = "opencode_answers_with_its_configuration_and_without_its_credentials";
    let Some(s) = Setup::new(test) else {
        return;
    };
    if !require_tool(test, "opencode") || !require_tool(test, "python3") {
        return;
    }
    let seen = s.env.path("seen.log");
    let (stub, port) = start_stub(&seen);
    // The host's OpenCode: a provider of its own configuration (the stub), its last model
    // (state), and what never enters a box (its credentials, its sessions' storage).
    write(
        &s.user.join(".config/opencode/opencode.json"),
        &format!(
            r#"{{"provider":{{"stub":{{"npm":"@ai-sdk/openai-compatible","name":"Stub","options":{{"baseURL":"http://127.0.0.1:{port}/v1","apiKey":"{{env:OPENAI_API_KEY}}"}},"models":{{"m":{{"name":"m"}}}}}}}},"model":"stub/m"}}"#
        ),
    );
    write(
        &s.user.join(".local/share/opencode/auth.json"),
        r#"{"anthropic":{"type":"api","key":"sk-file-never"}}"#,
    );
    write(
        &s.user.join(".local/share/opencode/storage/session/s.json"),
        "host session\n",
    );
    write(
        &s.user.join(".local/state/opencode/model.json"),
        r#"{"recent":[{"providerID":"stub","modelID":"m"}]}"#,
    );
    let key = format!("sk-oc-{}", agentbox_core::id::new_id());
    let seen_text = s.answer_from_stub(
        stub,
        &seen,
        &["opencode", "--", "run", "say hi"],
        &[("OPENAI_API_KEY", key.as_str())],
    );
    assert!(
        seen_text.contains(&format!("auth=Bearer {key}")),
        "{seen_text}"
    );
    let name = s.only_box();
    // The forwarded key reached the agent's process only: no other command of the box, and
    // no file, holds it.
    assert_eq!(search_box_for(&s, &name, &key), "0\n");
    let inside = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "test -e /root/.local/share/opencode/auth.json && echo credentials; grep -rl 'host session' /root/.local/share/opencode; cat /root/.local/state/opencode/model.json; echo",
        ],
        &[],
    );
    assert_eq!(
        inside,
        "{\"recent\":[{\"providerID\":\"stub\",\"modelID\":\"m\"}]}\n"
    );
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
