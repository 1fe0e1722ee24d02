//! A real `agentbox serve` on a free loopback port, and a real HTTP client (reqwest) that
//! talks to it with the home's token.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use crate::common::Env;

/// A running `agentbox serve`, killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub token: String,
    pub http: reqwest::blocking::Client,
}

impl Server {
    /// Start the server of `env`'s home in directory `dir`, on a port the kernel picks, and
    /// wait for the line that says where it listens.
    pub fn start(env: &Env, dir: &Path) -> Server {
        let mut child = env
            .command(&["serve", "--addr", "127.0.0.1:0"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agentbox serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut said = Vec::new();
        let base = loop {
            let line = match lines.next() {
                Some(Ok(l)) => l,
                _ => panic!("serve ended before listening: {said:?}"),
            };
            if let Some(rest) = line.strip_prefix("agentbox: serving the API on ") {
                let url = rest.split_whitespace().next().expect("url");
                break url.trim_end_matches("/api").to_owned();
            }
            said.push(line);
        };
        // Keep reading its stderr so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let token = std::fs::read_to_string(env.path("home").join("api-token"))
            .expect("the token file")
            .trim()
            .to_owned();
        Server {
            child,
            base,
            token,
            http: reqwest::blocking::Client::builder()
                .timeout(None)
                .build()
                .expect("client"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with the token.
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::blocking::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(&self.token)
    }

    /// GET `path` with the token; status and JSON body.
    pub fn get(&self, path: &str) -> (u16, serde_json::Value) {
        answer(self.req(reqwest::Method::GET, path).send().expect("GET"))
    }

    /// POST JSON `body` to `path` with the token; status and JSON body.
    pub fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        answer(
            self.req(reqwest::Method::POST, path)
                .json(&body)
                .send()
                .expect("POST"),
        )
    }
}

/// A response's status and JSON body (the body must be JSON).
pub fn answer(r: reqwest::blocking::Response) -> (u16, serde_json::Value) {
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = r.text().expect("body");
    assert!(
        ctype.starts_with("application/json"),
        "{status}: not JSON ({ctype}): {text}"
    );
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status}: bad JSON {e}: {text}")),
    )
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
