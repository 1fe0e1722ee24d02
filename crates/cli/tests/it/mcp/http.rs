//! `agentbox mcp --http` driven by the official MCP Python SDK's streamable HTTP client,
//! with the home's token; without it, the server answers 401 and runs nothing.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::{json, Value};

use super::{ok, require_sdk, TOOLS};
use crate::common::{git, write, Env};
use agentbox_testkit::tier::require_root;

/// A running `agentbox mcp --http`, killed on drop.
struct Served {
    child: std::process::Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(env: &Env, dir: &std::path::Path) -> Served {
    let mut child = env
        .command(&["mcp", "--http", "--addr", "127.0.0.1:0"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agentbox mcp --http");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(l)) => {
                if let Some(rest) = l.strip_prefix("agentbox: serving MCP on ") {
                    break rest.split_whitespace().next().expect("url").to_owned();
                }
            }
            _ => panic!("mcp --http ended before listening"),
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    Served { child, url }
}

#[test]
fn the_python_sdk_drives_a_box_over_streamable_http_with_the_token() {
    let test = "mcp::http::the_python_sdk_drives_a_box_over_streamable_http_with_the_token";
    if !require_root(test) || !require_sdk(test) {
        return;
    }
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let served = start(&env, &project);
    let token = std::fs::read_to_string(env.path("home").join("api-token"))
        .expect("token")
        .trim()
        .to_owned();
    let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp/client.py");
    let run = |token: &str| {
        std::process::Command::new("python3")
            .arg(&client)
            .arg(&served.url)
            .arg(
                json!([
                    {"tool": "create_box", "arguments": {"name": "h1"}},
                    {"tool": "exec", "arguments": {"box": "h1", "argv": ["sh", "-c", "echo two > b.txt; echo done"]}},
                    {"tool": "log", "arguments": {"box": "h1", "ancestors": true}},
                    {"tool": "status", "arguments": {"box": "no-such-box"}},
                ])
                .to_string(),
            )
            .env("AGENTBOX_TOKEN", token)
            .current_dir(&project)
            .output()
            .expect("run python3")
    };

    // Without the right token the client cannot even initialize, and no box is made.
    let refused = run("not-the-token");
    assert!(!refused.status.success());
    let raw = reqwest::blocking::Client::new()
        .post(&served.url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .expect("POST");
    assert_eq!(raw.status().as_u16(), 401);
    assert_eq!(env.run(&["status", "h1"]).status.code(), Some(3));

    let out = run(&token);
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
    assert_eq!(s["server"], json!("agentbox"));
    let mut names: Vec<&str> = s["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    names.sort();
    assert_eq!(names, TOOLS);
    let created = ok(&s, 0);
    assert_eq!(env.json(&["status", "h1"])["box"]["id"], created["id"]);
    let ran = ok(&s, 1);
    assert_eq!(ran["output"], json!("done\n"));
    let logged: Vec<&str> = ok(&s, 2)["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().expect("id"))
        .collect();
    assert_eq!(logged[0], ran["node"].as_str().expect("node"));
    assert_eq!(env.ok(&["exec", "h1", "--", "cat", "b.txt"]), "two\n");
    let err = &s["results"][3];
    assert_eq!(err["is_error"], json!(true));
    assert_eq!(err["structured"]["code"], json!(3));
}

#[test]
fn mcp_over_http_proves_it_holds_the_token_without_being_sent_it() {
    let env = Env::new();
    let s = start(&env, env.home.path());
    let base = s.url.trim_end_matches("/mcp");
    let port = crate::serve::proof::port_of(base);
    let token = std::fs::read_to_string(env.path("home").join("api-token"))
        .expect("the token file")
        .trim()
        .to_owned();
    let nonce = "a-fresh-nonce-of-an-mcp-client";
    let r = reqwest::blocking::Client::new()
        .get(format!("{base}/api/hello?nonce={nonce}"))
        .send()
        .expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().expect("JSON");
    assert_eq!(
        body["proof"].as_str(),
        Some(crate::serve::proof::proof(&token, port, nonce).as_str())
    );
}

#[test]
fn mcp_over_http_closes_half_finished_requests_and_answers_the_token_meanwhile() {
    use crate::serve::flood::{half_requests, until_closed, HANG};
    let env = Env::new();
    let s = start(&env, env.home.path());
    let base = s.url.trim_end_matches("/mcp");
    let token = std::fs::read_to_string(env.path("home").join("api-token"))
        .expect("the token file")
        .trim()
        .to_owned();
    let mut idle = half_requests(base, 100);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "flood-test", "version": "1"}}});
    let r = reqwest::blocking::Client::new()
        .post(&s.url)
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .expect("an answer to the token's holder");
    assert_eq!(r.status().as_u16(), 200);
    drop(r);
    let deadline = std::time::Instant::now() + HANG;
    for c in &mut idle {
        until_closed(c, deadline);
    }
}
