//! `agentbox mcp` driven by a real client: the official MCP Python SDK (PyPI `mcp`, run by
//! `client.py` beside this file) over stdio. Tier 2 (boxes need root); skipped with a reason
//! when root or the SDK is missing, failed under CI=true.

mod http;

use std::path::Path;

use serde_json::{json, Value};

use crate::common::{git, kill_supervisors, write, Env};
use agentbox_testkit::tier::{require_root, skip};

/// Every tool the server offers on the host.
const TOOLS: &[&str] = &[
    "checkout",
    "checkpoint_create",
    "checkpoint_list",
    "create_box",
    "destroy",
    "diff",
    "exec",
    "fork",
    "list_boxes",
    "list_files",
    "log",
    "read_file",
    "show",
    "status",
    "tag",
    "tournament",
    "undo",
    "write_file",
];

/// Whether the Python SDK can be imported (else the test is skipped, or fails under CI).
fn require_sdk(test: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import mcp"])
        .status()
        .is_ok_and(|s| s.success());
    ok || skip(test, "needs the MCP Python SDK: python3 -m pip install mcp")
}

/// One session of the Python client in directory `dir`: initialize, list the tools, then
/// `calls` in order; what it printed.
fn session(env: &Env, dir: &Path, calls: Value) -> Value {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp/client.py");
    let out = std::process::Command::new("python3")
        .arg(client)
        .arg(env!("CARGO_BIN_EXE_agentbox"))
        .arg(calls.to_string())
        .env("AGENTBOX_HOME", env.path("home"))
        .current_dir(dir)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client prints JSON")
}

/// The structured content of call `i`, which must have succeeded.
fn ok(s: &Value, i: usize) -> &Value {
    let r = &s["results"][i];
    assert_eq!(r["is_error"], json!(false), "call {i} failed: {r}");
    &r["structured"]
}

/// The node ids of the box's history, HEAD first, as the command line gives them.
fn cli_ancestors(env: &Env, name: &str) -> Vec<String> {
    env.json(&["log", name, "--ancestors"])
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn the_python_sdk_drives_a_box_through_create_exec_log_checkout_and_diff() {
    let test = "mcp::the_python_sdk_drives_a_box_through_create_exec_log_checkout_and_diff";
    if !require_root(test) || !require_sdk(test) {
        return;
    }
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let s = session(
        &env,
        &project,
        json!([
            {"tool": "create_box", "arguments": {"name": "m1"}},
            {"tool": "exec", "arguments": {"box": "m1", "argv": ["sh", "-c", "echo two > b.txt; echo done; exit 3"]}},
            {"tool": "log", "arguments": {"box": "m1", "ancestors": true}},
            {"tool": "status", "arguments": {"box": "no-such-box"}},
            {"tool": "exec", "arguments": {"box": "m1", "argv": ["sh", "-c", "seq 1 20000"], "max_output": 1000}},
            {"tool": "read_file", "arguments": {"box": "m1", "path": "b.txt"}},
            {"tool": "list_files", "arguments": {"box": "m1"}},
        ]),
    );
    assert_eq!(s["server"], json!("agentbox"));
    let mut names: Vec<&str> = s["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    names.sort();
    assert_eq!(names, TOOLS);
    for t in s["tools"].as_array().expect("tools") {
        assert_eq!(t["input_schema"]["type"], json!("object"), "{t}");
    }
    let exec_tool = s["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == json!("exec"))
        .expect("exec");
    assert_eq!(
        exec_tool["input_schema"]["properties"]["argv"]["type"],
        json!("array")
    );
    assert!(exec_tool["input_schema"]["required"]
        .as_array()
        .expect("required")
        .contains(&json!("argv")));

    // create: the box exists, as the command line sees it, at the node the tool said.
    let created = ok(&s, 0);
    assert_eq!(created["name"], json!("m1"));
    let status = env.json(&["status", "m1"]);
    assert_eq!(status["box"]["id"], created["id"]);

    // exec: its output and status, and the node it made is the box's HEAD now, holding
    // the file it wrote.
    let ran = ok(&s, 1);
    assert_eq!(ran["status"], json!(3));
    assert_eq!(ran["output"], json!("done\n"));
    assert_eq!(ran["truncated"], json!(false));
    let ancestors = cli_ancestors(&env, "m1");
    assert_eq!(ran["node"].as_str(), Some(ancestors[0].as_str()));
    assert_eq!(ancestors.len(), 2);
    assert_eq!(
        ancestors[1].as_str(),
        created["head"].as_str().expect("head")
    );
    assert_eq!(env.ok(&["exec", "m1", "--", "cat", "b.txt"]), "two\n");

    // log: the same nodes as the command line's.
    let logged: Vec<&str> = ok(&s, 2)["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().expect("id"))
        .collect();
    assert_eq!(logged, ancestors);

    // An unknown box is a tool error with the command line's message and hint.
    let err = &s["results"][3];
    assert_eq!(err["is_error"], json!(true));
    assert_eq!(err["structured"]["code"], json!(3));
    assert_eq!(
        err["structured"]["error"],
        json!("no box named \"no-such-box\"")
    );
    assert_eq!(
        err["structured"]["hint"],
        json!("`agentbox list` shows the boxes")
    );
    assert!(err["text"]
        .as_str()
        .expect("text")
        .contains("hint: `agentbox list` shows the boxes"));

    // Long output is cut, with a note saying how to get the rest.
    let long = ok(&s, 4);
    let full: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(long["output_bytes"], json!(full.len()));
    assert_eq!(long["truncated"], json!(true));
    let shown = long["output"].as_str().expect("output");
    assert!(shown.starts_with("1\n2\n3\n") && shown.ends_with("19999\n20000\n"));
    assert!(shown.len() < 1100);
    assert!(long["note"].as_str().expect("note").contains("read_file"));

    // Files are the box's.
    let read = ok(&s, 5);
    assert_eq!(
        (&read["content"], &read["size"], &read["more"]),
        (&json!("two\n"), &json!(4), &json!(false))
    );
    let listed: Vec<&str> = ok(&s, 6)["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(listed, [".git", "a.txt", "b.txt"]);

    // A second session: back to the node before the exec, then the diff from the exec's
    // node to the working tree, and a write.
    let exec_node = ran["node"].as_str().expect("node").to_owned();
    let s = session(
        &env,
        &project,
        json!([
            {"tool": "checkout", "arguments": {"box": "m1", "reference": "HEAD~1"}},
            {"tool": "diff", "arguments": {"box": "m1", "from": exec_node, "patch": true}},
            {"tool": "write_file", "arguments": {"box": "m1", "path": "d/c.txt", "content": "hi\n", "parents": true}},
            {"tool": "read_file", "arguments": {"box": "m1", "path": "nothing-here"}},
        ]),
    );
    let back = ok(&s, 0);
    assert_eq!(back["id"].as_str(), Some(ancestors[1].as_str()));
    // HEAD's line no longer has the exec's node (the write below adds to it).
    let after = cli_ancestors(&env, "m1");
    assert!(after.contains(&ancestors[1]) && !after.contains(&exec_node));
    let gone = env.run(&["exec", "m1", "--", "test", "-e", "b.txt"]);
    assert_eq!(
        gone.status.code(),
        Some(1),
        "b.txt is gone after the checkout"
    );
    let changes = ok(&s, 1)["changes"].as_array().expect("changes").clone();
    // The working tree then held the checked-out node.
    let cli_diff = env.json(&["diff", "m1", &exec_node, &ancestors[1]]);
    assert_eq!(
        changes
            .iter()
            .map(|c| c["path"].clone())
            .collect::<Vec<_>>(),
        cli_diff
            .as_array()
            .expect("changes")
            .iter()
            .map(|c| c["path"].clone())
            .collect::<Vec<_>>()
    );
    let b = changes
        .iter()
        .find(|c| c["path"] == json!("workspace/b.txt"))
        .expect("b.txt in the diff");
    assert_eq!(b["kind"], json!("removed"));
    assert!(b["patch"].as_str().expect("patch").contains("-two"));
    let wrote = ok(&s, 2);
    assert_eq!(env.ok(&["exec", "m1", "--", "cat", "d/c.txt"]), "hi\n");
    let wrote_node = wrote["node"].as_str().expect("the write made a node");
    assert!(cli_ancestors(&env, "m1").iter().any(|n| n == wrote_node));
    let shown = env.json(&["show", "m1", wrote_node]);
    assert!(
        shown["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .any(|c| c["path"] == json!("workspace/d/c.txt")),
        "{shown}"
    );
    let missing = &s["results"][3];
    assert_eq!(missing["is_error"], json!(true));
    assert_eq!(missing["structured"]["code"], json!(3), "{missing}");
    kill_supervisors(&env.path("home"));
}

/// `agentbox mcp` run inside box `name` (as an agent in it would), given the JSON-RPC
/// `requests` on its stdin after the handshake; the responses by id.
fn in_box_session(
    env: &Env,
    name: &str,
    requests: &[Value],
) -> std::collections::BTreeMap<i64, Value> {
    use std::io::{BufRead, Write};
    let mut child = env
        .command(&["exec", name, "--", "agentbox", "mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run agentbox exec");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    lines.extend_from_slice(requests);
    for l in &lines {
        writeln!(stdin, "{l}").expect("write a request");
    }
    let want = requests.len() + 1;
    let mut answers = std::collections::BTreeMap::new();
    for line in std::io::BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let v: Value = serde_json::from_str(&line.expect("a line")).expect("JSON-RPC");
        if let Some(id) = v["id"].as_i64() {
            answers.insert(id, v);
        }
        if answers.len() == want {
            break;
        }
    }
    drop(stdin);
    let _ = child.wait();
    answers
}

#[test]
fn inside_a_box_the_server_acts_on_that_box_only_through_the_relay() {
    let test = "mcp::inside_a_box_the_server_acts_on_that_box_only_through_the_relay";
    if !require_root(test) {
        return;
    }
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    env.run_in(&project, &["create", "inner"]);
    env.run_in(&project, &["create", "other"]);
    let call = |id: i64, tool: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let answers = in_box_session(
        &env,
        "inner",
        &[
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            call(3, "log", json!({"ancestors": true})),
            call(4, "tag", json!({"name": "from-mcp"})),
            call(5, "status", json!({"box": "other"})),
            call(6, "exec", json!({"argv": ["true"]})),
            call(7, "destroy", json!({"box": "other"})),
        ],
    );
    let mut offered: Vec<&str> = answers[&2]["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    offered.sort();
    assert_eq!(
        offered,
        [
            "checkout",
            "checkpoint_create",
            "diff",
            "log",
            "show",
            "status",
            "tag",
            "undo"
        ]
    );
    // Its own history, as the host has it.
    let logged: Vec<&str> = answers[&3]["result"]["structuredContent"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().expect("id"))
        .collect();
    assert_eq!(logged, cli_ancestors(&env, "inner"));
    // A tag set through the relay is the box's.
    assert_eq!(
        answers[&4]["result"]["isError"],
        json!(false),
        "{}",
        answers[&4]
    );
    assert!(env.json(&["tag", "inner"])["from-mcp"].is_string());
    // Another box, and what the relay does not answer, are refused with its error; the
    // other box is untouched.
    for id in [5, 6, 7] {
        let r = &answers[&id]["result"];
        assert_eq!(r["isError"], json!(true), "{r}");
        assert_eq!(r["structuredContent"]["code"], json!(4), "{r}");
        assert!(r["structuredContent"]["hint"]
            .as_str()
            .expect("hint")
            .contains("on this box only"));
    }
    assert_eq!(
        env.json(&["status", "other"])["box"]["name"],
        json!("other")
    );
    kill_supervisors(&env.path("home"));
}

/// `mcp-inspector --cli` (the MCP Inspector's CLI mode, npm `@modelcontextprotocol/inspector`)
/// against `agentbox mcp` in directory `dir`: `method` with `args`; what it printed.
fn inspector(env: &Env, dir: &Path, args: &[&str]) -> Value {
    let home = format!("AGENTBOX_HOME={}", env.path("home").display());
    let out = std::process::Command::new("mcp-inspector")
        .args(["--cli", "-e", &home, env!("CARGO_BIN_EXE_agentbox"), "mcp"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run mcp-inspector");
    assert!(
        out.status.success(),
        "mcp-inspector {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the inspector prints JSON")
}

#[test]
fn the_inspector_cli_lists_the_tools_and_runs_a_command_in_a_box() {
    let test = "mcp::the_inspector_cli_lists_the_tools_and_runs_a_command_in_a_box";
    if !require_root(test) {
        return;
    }
    if !agentbox_testkit::tier::require_tool(test, "mcp-inspector") {
        return;
    }
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let listed = inspector(&env, &project, &["--method", "tools/list"]);
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    names.sort();
    assert_eq!(names, TOOLS);
    let created = inspector(
        &env,
        &project,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "create_box",
            "--tool-arg",
            "name=insp",
        ],
    );
    assert_eq!(
        created["structuredContent"]["name"],
        json!("insp"),
        "{created}"
    );
    let ran = inspector(
        &env,
        &project,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "exec",
            "--tool-arg",
            "box=insp",
            "--tool-arg",
            r#"argv=["sh", "-c", "echo made > m.txt; cat a.txt"]"#,
        ],
    );
    let r = &ran["structuredContent"];
    assert_eq!(
        (&r["status"], &r["output"]),
        (&json!(0), &json!("one\n")),
        "{ran}"
    );
    assert_eq!(env.ok(&["exec", "insp", "--", "cat", "m.txt"]), "made\n");
    assert_eq!(
        r["node"].as_str(),
        Some(cli_ancestors(&env, "insp")[0].as_str())
    );
    kill_supervisors(&env.path("home"));
}
