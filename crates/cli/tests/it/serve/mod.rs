//! `agentbox serve` driven by real HTTP clients: reqwest from these tests, and schemathesis
//! (PyPI) against the server's own OpenAPI document. The token and error tests are tier 0;
//! those that make boxes are tier 2 (root), skipped with a reason when root (or
//! schemathesis) is missing, failed under CI=true.

pub(crate) mod flood;
pub(crate) mod proof;
mod schema;
mod server;
mod web;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{git, write, Env};
use agentbox_testkit::tier::require_root;
use server::{answer, Server};

/// How long a test waits for an event before it fails instead of hanging (a guard, not a
/// measurement).
const HANG: Duration = Duration::from_secs(120);

#[test]
fn every_request_needs_the_token_and_errors_come_back_as_json() {
    let env = Env::new();
    let s = Server::start(&env, env.home.path());
    let file = env.path("home").join("api-token");
    let mode = std::fs::metadata(&file)
        .expect("token")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the token is private");
    assert_eq!(s.token.len(), 64);
    assert!(s.token.bytes().all(|b| b.is_ascii_hexdigit()));

    // Without the token, with another one, or with it cut or lengthened: 401, and nothing
    // else of the request is looked at.
    let mut wrong = s.token.clone().into_bytes();
    wrong[10] = if wrong[10] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).expect("hex");
    let attempts = [
        None,
        Some(wrong),
        Some(s.token[..63].to_owned()),
        Some(format!("{}0", s.token)),
        Some(String::new()),
    ];
    for given in attempts {
        let mut r = s.http.get(s.url("/api/openapi.json"));
        if let Some(t) = &given {
            r = r.bearer_auth(t);
        }
        let r = r.send().expect("GET");
        assert_eq!(
            r.headers().get("www-authenticate").map(|v| v.as_bytes()),
            Some(&b"Bearer"[..])
        );
        let (status, body) = answer(r);
        assert_eq!(status, 401, "token {given:?}");
        assert_eq!(body["error"], json!("missing or wrong API token"));
        assert!(body["hint"].as_str().expect("hint").contains("api-token"));
    }
    let r = s
        .http
        .get(s.url("/api/openapi.json"))
        .header("authorization", format!("Basic {}", s.token))
        .send()
        .expect("GET");
    assert_eq!(r.status().as_u16(), 401);

    // With it: the document, generated from the routes.
    let (status, doc) = s.get("/api/openapi.json");
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().expect("version").starts_with("3.1"));
    for path in [
        "/api/boxes",
        "/api/boxes/{box}",
        "/api/boxes/{box}/exec",
        "/api/boxes/{box}/log",
        "/api/boxes/{box}/diff",
        "/api/boxes/{box}/checkout",
        "/api/events",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} in the document");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        json!("bearer")
    );
    assert_eq!(
        doc["components"]["schemas"]["ExecBody"]["required"],
        json!(["argv"])
    );

    // An unknown box: 404 with the command line's message, hint and exit code.
    let (status, body) = s.get("/api/boxes/no-such-box/log");
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], json!(3));
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("no-such-box"),
        "{body}"
    );
    let cli = env.run(&["--json", "log", "no-such-box"]);
    let cli: Value = serde_json::from_slice(&cli.stdout).expect("the CLI's JSON error");
    assert_eq!(body, cli, "the API's error is the command line's");

    // A body over the limit: 413 before it is read whole; a malformed one: 400.
    let big = format!("{{\"argv\": [\"{}\"]}}", "x".repeat(2 << 20));
    // A client of its own: the server closes the connection it refused a body on.
    let (status, body) = answer(
        reqwest::blocking::Client::new()
            .post(s.url("/api/boxes/no-such-box/exec"))
            .bearer_auth(&s.token)
            .header("content-type", "application/json")
            .body(big)
            .send()
            .expect("POST"),
    );
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], json!(2));
    let (status, body) = answer(
        s.req(reqwest::Method::POST, "/api/boxes/no-such-box/exec")
            .header("content-type", "application/json")
            .body("{\"argv\": ")
            .send()
            .expect("POST"),
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = s.post(
        "/api/boxes/no-such-box/exec",
        json!({"argv": ["true"], "nope": 1}),
    );
    assert_eq!(status, 400, "an unknown field is refused: {body}");
    let (status, body) = s.get("/api/no-such-route");
    assert_eq!(status, 404);
    assert_eq!(body["code"], json!(3));

    // A second server keeps the token; a token others can read is refused.
    drop(s);
    let again = Server::start(&env, env.home.path());
    assert_eq!(again.token.len(), 64);
    let first = std::fs::read_to_string(&file).expect("token");
    assert_eq!(again.token, first.trim());
    drop(again);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = env.run(&["serve", "--addr", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not private"));
    std::fs::remove_file(&file).expect("rm");
    std::os::unix::fs::symlink(env.path("elsewhere"), &file).expect("symlink");
    let out = env.run(&["serve", "--addr", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(4), "a planted symlink is refused");
    assert!(!env.path("elsewhere").exists());
}

/// The events of a stream, one `(name, data)` per event, read on a thread of their own.
fn events(s: &Server, query: &str) -> mpsc::Receiver<(String, Value)> {
    let r = s
        .req(reqwest::Method::GET, &format!("/api/events{query}"))
        .send()
        .expect("GET events");
    assert_eq!(r.status().as_u16(), 200);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut name = String::new();
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { return };
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                let data = serde_json::from_str(d).unwrap_or(Value::String(d.to_owned()));
                if tx.send((std::mem::take(&mut name), data)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The first event named `name` whose data satisfies `want`.
fn wait_for(
    rx: &mpsc::Receiver<(String, Value)>,
    name: &str,
    want: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let (n, data) = rx
            .recv_timeout(HANG)
            .unwrap_or_else(|e| panic!("no {name} event: {e}"));
        if n == name && want(&data) {
            return data;
        }
    }
}

fn ids(nodes: &Value) -> Vec<String> {
    nodes
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn a_client_drives_a_box_through_create_exec_log_checkout_and_diff_and_sees_its_events() {
    let test = "serve::a_client_drives_a_box_through_create_exec_log_checkout_and_diff_and_sees_its_events";
    if !require_root(test) {
        return;
    }
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let s = Server::start(&env, &project);
    let all = events(&s, "");

    // create: the box exists as the command line sees it, and the stream says so.
    let (status, made) = s.post("/api/boxes", json!({"name": "s1"}));
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["name"], json!("s1"));
    assert_eq!(env.json(&["status", "s1"])["box"]["id"], made["id"]);
    wait_for(&all, "created", |d| d["box"] == json!("s1"));
    let (status, listed) = s.get("/api/boxes");
    assert_eq!(status, 200);
    assert!(listed
        .as_array()
        .expect("rows")
        .iter()
        .any(|r| r["name"] == json!("s1")));

    // exec: its status and output, and the node it made is HEAD, as the stream reports.
    let mine = events(&s, "?box=s1");
    let (status, ran) = s.post(
        "/api/boxes/s1/exec",
        json!({"argv": ["sh", "-c", "echo two > b.txt; echo done; exit 3"]}),
    );
    assert_eq!(status, 200, "{ran}");
    assert_eq!(
        (&ran["status"], &ran["output"]),
        (&json!(3), &json!("done\n"))
    );
    let node = ran["node"].as_str().expect("a node").to_owned();
    let cli = ids(&env.json(&["log", "s1", "--ancestors"]));
    assert_eq!(cli[0], node);
    let seen = wait_for(&mine, "node", |d| d["id"] == json!(node));
    assert_eq!(seen["box"], json!("s1"));
    assert_eq!(seen["parent"].as_str(), Some(cli[1].as_str()));

    // log: the command line's nodes.
    let (status, log) = s.get("/api/boxes/s1/log?ancestors=true");
    assert_eq!(status, 200);
    assert_eq!(ids(&log["nodes"]), cli);
    let (_, full) = s.get("/api/boxes/s1/log");
    assert_eq!(full["head"], json!(node));

    // checkout: back before the exec; the file is gone in the box; HEAD's move is an event.
    let (status, back) = s.post("/api/boxes/s1/checkout", json!({"reference": "HEAD~1"}));
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["id"].as_str(), Some(cli[1].as_str()));
    let gone = env.run(&["exec", "s1", "--", "test", "-e", "b.txt"]);
    assert_eq!(
        gone.status.code(),
        Some(1),
        "b.txt is gone after the checkout"
    );
    wait_for(&mine, "head", |d| d["node"] == json!(cli[1]));

    // diff from the exec's node to the working tree: b.txt removed, as the CLI says.
    let (status, diff) = s.get(&format!("/api/boxes/s1/diff?from={node}&patch=true"));
    assert_eq!(status, 200, "{diff}");
    let cli_diff = env.json(&["diff", "s1", &node, &cli[1]]);
    let paths = |v: &Value| -> Vec<Value> {
        v.as_array()
            .expect("changes")
            .iter()
            .map(|c| c["path"].clone())
            .collect()
    };
    assert_eq!(paths(&diff), paths(&cli_diff));
    let b = diff
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["path"] == json!("workspace/b.txt"))
        .expect("b.txt in the diff");
    assert_eq!(b["kind"], json!("removed"));
    assert!(b["patch"].as_str().expect("patch").contains("-two"));

    // show, files, tags, status.
    let (status, shown) = s.get(&format!("/api/boxes/s1/nodes/{node}"));
    assert_eq!(status, 200);
    assert!(shown["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .any(|c| c["path"] == json!("workspace/b.txt")));
    let (status, read) = s.get("/api/boxes/s1/file?path=a.txt");
    assert_eq!(status, 200);
    assert_eq!(read["content"], json!("one\n"));
    let (status, tagged) = answer(
        s.req(reqwest::Method::PUT, "/api/boxes/s1/tags/good")
            .json(&json!({"reference": node}))
            .send()
            .expect("PUT"),
    );
    assert_eq!(status, 200, "{tagged}");
    assert_eq!(env.json(&["tag", "s1"])["good"], json!(node));
    let (status, st) = s.get("/api/boxes/s1");
    assert_eq!(status, 200);
    assert_eq!(st["box"]["id"], made["id"]);

    // destroy: gone for the command line, and for the stream.
    let (status, destroyed) = answer(
        s.req(reqwest::Method::DELETE, "/api/boxes/s1")
            .send()
            .expect("DELETE"),
    );
    assert_eq!(status, 200, "{destroyed}");
    assert_eq!(destroyed["destroyed"], json!("s1"));
    assert_eq!(env.run(&["status", "s1"]).status.code(), Some(3));
    wait_for(&all, "destroyed", |d| d["box"] == json!("s1"));
    let (status, _) = s.get("/api/boxes/s1");
    assert_eq!(status, 404);
}
