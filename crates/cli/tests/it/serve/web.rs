//! The web view of `agentbox serve`: its page and assets (served without the token, under
//! a policy that forbids inline script), and the page itself in headless Chromium driven
//! by Playwright (`web_page.cjs`): two real boxes listed, a node opened, its diff, a
//! rollback, a node a command made appearing live, and a file name made of HTML shown as
//! text. The browser test is tier 2 (root, for the boxes) and needs Debian's `chromium`
//! and npm's `playwright-core`; it skips with a reason without them and fails under
//! CI=true. The process routes the page follows a spawned process with are read here too.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::{git, write, Env};
use agentbox_testkit::tier::{require_root, skip};

/// A running `agentbox serve` and the web view's address it printed; killed on drop.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT/#token=...`, as printed.
    page: String,
    token: String,
}

impl Served {
    fn start(env: &Env, dir: &Path) -> Served {
        let mut child = env
            .command(&["serve", "--addr", "127.0.0.1:0"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agentbox serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut said = Vec::new();
        let page = loop {
            let line = match lines.next() {
                Some(Ok(l)) => l,
                _ => panic!("serve ended before printing the web view's address: {said:?}"),
            };
            if let Some(rest) = line.trim().strip_prefix("web view: ") {
                break rest.to_owned();
            }
            said.push(line);
        };
        std::thread::spawn(move || lines.for_each(drop));
        let token = std::fs::read_to_string(env.path("home").join("api-token"))
            .expect("the token file")
            .trim()
            .to_owned();
        Served { child, page, token }
    }

    fn base(&self) -> &str {
        self.page.split("/#").next().expect("base")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_page_needs_no_token_but_the_api_does_and_no_inline_script_may_run() {
    let env = Env::new();
    let s = Served::start(&env, env.home.path());
    assert_eq!(s.page, format!("{}/#token={}", s.base(), s.token));
    let http = reqwest::blocking::Client::new();
    for (path, ctype) in [
        ("/", "text/html"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/tree.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
    ] {
        let r = http.get(format!("{}{path}", s.base())).send().expect("GET");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let h = r.headers();
        assert!(h["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with(ctype));
        let csp = h["content-security-policy"].to_str().expect("ascii");
        assert!(csp.contains("script-src 'self';"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        let body = r.text().expect("body");
        assert!(!body.contains(&s.token), "{path} carries no secret");
    }
    // The page's script reads the token from the fragment only; the API still wants it.
    let r = http
        .get(format!("{}/api/boxes?token={}", s.base(), s.token))
        .send()
        .expect("GET");
    assert_eq!(r.status().as_u16(), 401, "no token in a query string");
    let r = http
        .get(format!("{}/api/events?token={}", s.base(), s.token))
        .send()
        .expect("GET");
    assert_eq!(r.status().as_u16(), 401, "not on the event stream either");
    let r = http
        .get(format!("{}/assets/other.js", s.base()))
        .send()
        .expect("GET");
    assert_eq!(r.status().as_u16(), 401, "no other path is open");
}

/// Where npm's global packages are, when `playwright-core` is among them.
fn playwright(test: &str) -> Option<PathBuf> {
    let root = Command::new("npm")
        .args(["root", "-g"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match root {
        Some(r) if r.join("playwright-core").is_dir() => Some(r),
        _ => {
            skip(test, "needs node and `npm install -g playwright-core`");
            None
        }
    }
}

fn head(env: &Env, name: &str) -> String {
    env.json(&["log", name, "--ancestors"])[0]["id"]
        .as_str()
        .expect("HEAD's id")
        .to_owned()
}

#[test]
fn in_chromium_the_page_lists_boxes_shows_a_diff_rolls_back_and_updates_live() {
    let test =
        "serve::web::in_chromium_the_page_lists_boxes_shows_a_diff_rolls_back_and_updates_live";
    if !require_root(test) {
        return;
    }
    if !Path::new("/usr/bin/chromium").exists() {
        skip(test, "needs Debian's chromium: apt-get install chromium");
        return;
    }
    let Some(modules) = playwright(test) else {
        return;
    };
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    env.run_in(&project, &["create", "w1"]);
    env.run_in(&project, &["create", "w2"]);
    let first = head(&env, "w1");
    env.run_in(
        &project,
        &["exec", "w1", "--", "sh", "-c", "echo added-line >> a.txt"],
    );
    let changed = head(&env, "w1");
    // A file name that is HTML: markup and an event handler that would set a global.
    let marked = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2<script>.txt";
    env.run_in(
        &project,
        &[
            "exec",
            "w1",
            "--",
            "sh",
            "-c",
            &format!("echo x > '{marked}'"),
        ],
    );
    let marked_node = head(&env, "w1");

    let s = Served::start(&env, &project);
    let spec = serde_json::json!({
        "boxes": ["w1", "w2"],
        "box": "w1",
        "nodes": 3,
        "marked": {"id": marked_node, "path": format!("workspace/{marked}")},
        "changed": {"id": changed, "path": "workspace/a.txt", "line": "+added-line"},
        "back": first,
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/serve/web_page.cjs");
    let mut node = Command::new("node");
    node.arg(&script)
        .arg(&s.page)
        .arg(spec.to_string())
        .env("NODE_PATH", &modules)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if let Ok(dir) = std::env::var("AGENTBOX_WEB_SHOTS") {
        node.env("SHOTS", dir);
    }
    let mut node = node.spawn().expect("node");
    let mut stdin = node.stdin.take().expect("stdin");
    let mut said = Vec::new();
    for line in BufReader::new(node.stdout.take().expect("stdout")).lines() {
        let line = line.expect("a line");
        if line == "need-node" {
            // A command from the command line, not the page: the page learns of its
            // node from the event stream alone.
            env.run_in(
                &project,
                &["exec", "w1", "--", "sh", "-c", "echo live > live.txt"],
            );
            writeln!(stdin, "{}", head(&env, "w1")).expect("to the script");
        }
        said.push(line);
    }
    let status = node.wait().expect("wait");
    assert!(status.success(), "the page failed its checks: {said:?}");
    assert_eq!(said.last().map(String::as_str), Some("ok"), "{said:?}");
}

#[test]
fn a_spawned_process_and_its_output_are_read_through_the_api_by_offset() {
    let test = "serve::web::a_spawned_process_and_its_output_are_read_through_the_api_by_offset";
    if !require_root(test) {
        return;
    }
    let env = Env::new();
    let project = env.path("proj");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    env.run_in(&project, &["create", "p1"]);
    let spawned = env.json(&[
        "spawn",
        "p1",
        "--",
        "sh",
        "-c",
        "echo first-line; echo 'second <b>line</b>'",
    ]);
    let id = spawned["id"].as_u64().expect("the process's id");
    let s = Served::start(&env, &project);
    let http = reqwest::blocking::Client::new();
    let get = |path: &str| -> serde_json::Value {
        let r = http
            .get(format!("{}{path}", s.base()))
            .bearer_auth(&s.token)
            .send()
            .expect("GET");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        r.json().expect("JSON")
    };
    let log = format!("/api/boxes/p1/processes/{id}/log");
    // The process may still be writing: read until both lines are there (bounded).
    let mut text = String::new();
    for _ in 0..200 {
        text = get(&log)["text"].as_str().expect("text").to_owned();
        if text.contains("line</b>") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(text, "first-line\nsecond <b>line</b>\n");
    let listed = get("/api/boxes/p1/processes");
    let me = listed
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["id"].as_u64() == Some(id))
        .expect("the spawned process is listed");
    assert_eq!(me["argv"][0], "sh");
    // From an offset: the rest, and `next` where the log ends; at the end, nothing more.
    let part = get(&format!("{log}?offset=11"));
    assert_eq!(part["text"], "second <b>line</b>\n");
    assert_eq!(part["offset"], 11);
    let end = part["next"].as_u64().expect("next");
    assert_eq!(end as usize, text.len());
    let tail = get(&format!("{log}?offset={end}"));
    assert_eq!(
        (tail["text"].as_str(), tail["next"].as_u64()),
        (Some(""), Some(end))
    );
    // Without the token: refused like every API route.
    let r = http.get(format!("{}{log}", s.base())).send().expect("GET");
    assert_eq!(r.status().as_u16(), 401);
}
