//! The credential broker end to end: boxes made by the real binary (`create --broker`, and
//! through the façade) call a loopback stub of the Messages API with their placeholder;
//! the stub sees the host's real key, the answer streams into the box event by event, and
//! nothing in the box — environment, files, processes — holds the real key.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentbox_broker::stub::{Stub, StubConfig};
use agentbox_testkit::tier::{require_root, require_tool};

use crate::common::{code, kill_supervisors, stderr, write, Env};

/// Events the stub streams, one every [`GAP`].
const EVENTS: usize = 5;
const GAP: Duration = Duration::from_millis(300);

/// A temporary home whose upstreams are a stub, a project, and a real key no file on this
/// machine holds (random per test). Its boxes' supervisors are killed when it is dropped.
struct Brokered {
    env: Env,
    proj: PathBuf,
    stub: Stub,
    key: String,
}

impl Brokered {
    /// `None`: skipped (not root, or no curl).
    fn new(test: &str) -> Option<Brokered> {
        if !require_root(test) || !require_tool(test, "curl") {
            return None;
        }
        let env = Env::new();
        let proj = env.home.path().join("proj");
        write(&proj.join("README"), "readme\n");
        let stub = Stub::start(StubConfig {
            events: EVENTS,
            gap: GAP,
        })
        .expect("start the stub");
        for key in ["broker.anthropicUpstream", "broker.openaiUpstream"] {
            env.ok(&["config", "set", "--global", key, stub.url()]);
        }
        let key = format!(
            "sk-ant-test-{}{}",
            agentbox_core::id::new_id(),
            agentbox_core::id::new_id()
        );
        Some(Brokered {
            env,
            proj,
            stub,
            key,
        })
    }

    /// `agentbox ARGS` from a shell whose environment holds the real key.
    fn run(&self, args: &[&str]) -> std::process::Output {
        self.env
            .run_with(args, &[("ANTHROPIC_API_KEY", self.key.as_str())])
    }

    fn create(&self, name: &str, extra: &[&str]) {
        let from = self.proj.to_str().expect("utf-8 path");
        let mut args = vec!["create", name, "--from", from];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        assert!(out.status.success(), "create {name}: {}", stderr(&out));
    }

    /// `sh -c SCRIPT` in box `name` with `env` (`--env K=V` each): its stdout.
    fn sh(&self, name: &str, env: &[String], script: &str) -> String {
        let mut args = vec!["exec".to_owned(), name.to_owned()];
        for kv in env {
            args.extend(["--env".to_owned(), kv.clone()]);
        }
        args.extend(["--", "sh", "-c", script].map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.run(&args);
        assert_eq!(code(&out), Some(0), "{script}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stream a Messages request from box `name` through its base URL and placeholder:
    /// each event line with when it arrived in the box (ns since the epoch).
    fn stream(&self, name: &str) -> Vec<(u128, String)> {
        let out = self.sh(
            name,
            &[],
            r#"curl -sSN -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' \
                 -H 'content-type: application/json' -d '{"stream":true}' \
                 "$ANTHROPIC_BASE_URL/v1/messages" |
               while IFS= read -r line; do
                 case "$line" in data:*) echo "$(date +%s%N) $line";; esac
               done"#,
        );
        out.lines()
            .filter_map(|l| {
                let (t, rest) = l.split_once(' ')?;
                Some((t.parse().ok()?, rest.to_owned()))
            })
            .collect()
    }

    /// An HTTP status a box's `curl ARGS` gets.
    fn status_of(&self, name: &str, curl_args: &str) -> String {
        self.sh(
            name,
            &[],
            // curl's own status would fail the exec when it cannot connect ("000").
            &format!("curl -s -o /dev/null -w '%{{http_code}}' {curl_args} || true"),
        )
    }

    /// What in box `name` holds the real key: processes' environments and command lines,
    /// the box's own places in full (`/etc`, `/root`, `/run` — its inbox too —, `/tmp`,
    /// `/workspace`, `/home`) and every other file written since `since` (the rest of `/`
    /// is the host's own read-only tree, tens of gigabytes here, which agentbox does not
    /// write). The key reaches the box in two halves, so no search is found by itself.
    fn traces_in(&self, name: &str, since: u64) -> String {
        let (a, b) = self.key.split_at(self.key.len() / 2);
        self.sh(
            name,
            &[format!("P1={a}"), format!("P2={b}"), format!("SINCE={since}")],
            r#"k="$P1$P2"
               for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
                 c=$(tr '\0' ' ' < "$f" 2>/dev/null)
                 case "$c" in *"$k"*) echo "process: $f";; esac
               done
               pat=/tmp/.pattern; printf '%s' "$k" > "$pat"
               grep -rlsF -f "$pat" /etc /root /run /tmp /workspace /home | grep -vx "$pat" | sed 's/^/file: /'
               find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -newermt "@$SINCE" -print0 2>/dev/null |
                 xargs -0 -r grep -lsF -f "$pat" | grep -vx "$pat" | sed 's/^/recent file: /'
               rm -f "$pat"
               true"#,
        )
    }

    /// Host processes whose environment holds the real key (none may: the supervisors,
    /// the boxes' first processes and their helpers got it over a socket, if at all).
    fn host_processes_with_key(&self) -> Vec<String> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
            let p = e.path();
            if let Ok(env) = std::fs::read(p.join("environ")) {
                if env
                    .split(|b| *b == 0)
                    .any(|kv| kv.ends_with(self.key.as_bytes()))
                {
                    let cmd = std::fs::read(p.join("cmdline")).unwrap_or_default();
                    found.push(format!(
                        "{}: {}",
                        p.display(),
                        String::from_utf8_lossy(&cmd).replace('\0', " ")
                    ));
                }
            }
        }
        found
    }
}

impl Drop for Brokered {
    fn drop(&mut self) {
        kill_supervisors(&self.env.path("home"));
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Every event arrived, and they arrived spread out as the stub sent them, not in one
/// piece at the end.
fn assert_streamed(events: &[(u128, String)]) {
    assert_eq!(events.len(), EVENTS, "events: {events:?}");
    let first = events[0].0;
    let last = events[EVENTS - 1].0;
    let spread = Duration::from_nanos((last - first) as u64);
    assert!(
        spread >= GAP * 3,
        "the events arrived within {spread:?}, not one by one: {events:?}"
    );
    for (i, (_, line)) in events.iter().enumerate() {
        assert_eq!(line, &format!("data: {{\"n\":{i}}}"));
    }
}

#[test]
fn a_box_reaches_the_upstream_with_the_hosts_key_and_never_holds_it() {
    let Some(t) = Brokered::new("a_box_reaches_the_upstream_with_the_hosts_key_and_never_holds_it")
    else {
        return;
    };
    let since = now().saturating_sub(1);
    t.create("one", &["--broker"]);
    let env = t.sh("one", &[], "env");
    assert!(
        env.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:")
            && env.contains("ANTHROPIC_API_KEY=agentbox-placeholder-")
            && env.contains("OPENAI_BASE_URL=http://127.0.0.1:"),
        "{env}"
    );
    assert_streamed(&t.stream("one"));
    let seen = t.stub.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].api_key.as_deref(), Some(t.key.as_str()));
    assert_eq!(seen[0].body, r#"{"stream":true}"#);

    // Another box's broker takes only that box's token; paths outside the API go nowhere.
    t.create("two", &["--broker"]);
    let two_url = t.sh("two", &[], "printf %s \"$ANTHROPIC_BASE_URL\"");
    let status = t.status_of(
        "one",
        &format!("-H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{{}}' {two_url}/v1/messages"),
    );
    assert_eq!(status, "401", "box one's token at box two's broker");
    for path in ["/", "/v1/messages", "/anthropic/v2/x", "/metrics"] {
        let base = two_url.trim_end_matches("/anthropic");
        let status = t.status_of(
            "two",
            &format!("-H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{{}}' {base}{path}"),
        );
        assert_eq!(status, "404", "{path}");
    }
    let status = t.status_of(
        "two",
        "-H 'x-api-key: sk-guess' -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages\"",
    );
    assert_eq!(status, "401");
    assert_eq!(t.stub.seen().len(), 1, "nothing refused was forwarded");

    let traces = t.traces_in("one", since);
    assert!(
        traces.trim().is_empty(),
        "the real key is in the box:\n{traces}"
    );
    let host = t.host_processes_with_key();
    assert!(host.is_empty(), "processes hold the key: {host:?}");
}

#[test]
fn a_box_without_a_network_reaches_its_broker_across_checkouts() {
    let Some(t) = Brokered::new("a_box_without_a_network_reaches_its_broker_across_checkouts")
    else {
        return;
    };
    t.create("off", &["--broker", "--network", "none"]);
    let no_net = t.status_of("off", &format!("{}/v1/messages", t.stub.url()));
    assert_eq!(
        no_net, "000",
        "the box has no way to the stub but its broker"
    );
    assert_streamed(&t.stream("off"));
    assert_eq!(
        t.stub.seen()[0].api_key.as_deref(),
        Some(t.key.as_str()),
        "the stub saw the host's key"
    );
    // A checkout restarts the box in a new network namespace: the same URL still works.
    let url = t.sh("off", &[], "printf %s \"$ANTHROPIC_BASE_URL\"");
    t.sh("off", &[], "echo changed > /workspace/file");
    let out = t.run(&["undo", "off"]);
    assert!(out.status.success(), "undo: {}", stderr(&out));
    assert_eq!(t.sh("off", &[], "printf %s \"$ANTHROPIC_BASE_URL\""), url);
    assert_streamed(&t.stream("off"));
    // The broker's unix socket in the box's inbox answers the same.
    let out = t.sh(
        "off",
        &[],
        r#"curl -sS --unix-socket /run/agentbox/ctl/broker.sock -H "x-api-key: $ANTHROPIC_API_KEY" \
             -d '{}' http://broker/anthropic/v1/messages"#,
    );
    assert!(out.contains("\"n\":4"), "{out}");
    assert_eq!(t.stub.seen().len(), 3);
    assert!(t.host_processes_with_key().is_empty());
}

#[test]
fn the_facade_starts_a_broker_with_given_credentials() {
    let Some(t) = Brokered::new("the_facade_starts_a_broker_with_given_credentials") else {
        return;
    };
    use agentbox_boxes::agents::broker::{Credentials, Endpoint};
    use agentbox_broker::{AnthropicCredential, Secret};
    t.create("plain", &["--network", "private"]);
    assert!(
        !t.sh("plain", &[], "env").contains("ANTHROPIC_BASE_URL"),
        "no broker unless asked"
    );
    let home = agentbox_core::Home::at(t.env.path("home"));
    let provider = Arc::new(agentbox_provider_local::local::LocalProvider::with_binary(
        home.clone(),
        env!("CARGO_BIN_EXE_agentbox").into(),
    ));
    let boxes = agentbox_boxes::facade::Boxes::new(home, provider);
    let credentials = |key: &str| Credentials {
        anthropic: Some(AnthropicCredential::OauthToken(Secret::new(key))),
        openai: Some(Secret::new(format!("{key}-openai"))),
    };
    let endpoint: Endpoint = boxes
        .broker("plain", credentials(&t.key))
        .expect("start the broker");
    assert!(endpoint.anthropic_oauth);
    let env = t.sh("plain", &[], "env");
    assert!(
        env.contains(&format!(
            "CLAUDE_CODE_OAUTH_TOKEN={}",
            endpoint.token.as_str()
        )) && env.contains(&format!(
            "ANTHROPIC_BASE_URL={}",
            endpoint.anthropic_base_url()
        )),
        "{env}"
    );
    let status = t.status_of(
        "plain",
        "-H \"Authorization: Bearer $CLAUDE_CODE_OAUTH_TOKEN\" -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages\"",
    );
    assert_eq!(status, "200");
    let status = t.status_of(
        "plain",
        "-H \"Authorization: Bearer $OPENAI_API_KEY\" -d '{}' \"$OPENAI_BASE_URL/chat/completions\"",
    );
    assert_eq!(status, "200");
    let seen = t.stub.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].authorization, Some(format!("Bearer {}", t.key)));
    assert_eq!(seen[1].path, "/v1/chat/completions");
    assert_eq!(
        seen[1].authorization,
        Some(format!("Bearer {}-openai", t.key))
    );
    // Asking again gives the running broker new credentials: same endpoint, new key.
    let again = boxes
        .broker("plain", credentials("sk-rotated"))
        .expect("update the broker");
    assert_eq!((again.port, &again.token), (endpoint.port, &endpoint.token));
    t.status_of(
        "plain",
        "-H \"Authorization: Bearer $CLAUDE_CODE_OAUTH_TOKEN\" -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages\"",
    );
    assert_eq!(
        t.stub.seen()[2].authorization.as_deref(),
        Some("Bearer sk-rotated")
    );
}

#[test]
fn a_rootless_box_without_a_network_reaches_its_broker() {
    let Some(t) = Brokered::new("a_rootless_box_without_a_network_reaches_its_broker") else {
        return;
    };
    // A normal user's home and binary (where `nobody` can reach them), as `as_nobody` makes.
    let home = t.env.home.path().join("nobody");
    std::fs::create_dir_all(&home).expect("mkdir");
    let exe = home.join("agentbox");
    std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), &exe).expect("copy the binary");
    let proj = home.join("proj");
    write(&proj.join("README"), "readme\n");
    crate::common::chown_nobody(&home);
    let nobody = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args(args)
            .env("AGENTBOX_HOME", &home)
            .env("HOME", &home)
            .env("ANTHROPIC_API_KEY", &t.key)
            .current_dir("/")
            .output()
            .expect("run setpriv");
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    struct Stop(PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            kill_supervisors(&self.0);
        }
    }
    let _stop = Stop(home.clone());
    nobody(&[
        "config",
        "set",
        "--global",
        "broker.anthropicUpstream",
        t.stub.url(),
    ]);
    let from = proj.to_str().expect("utf-8 path");
    nobody(&[
        "create",
        "r",
        "--from",
        from,
        "--broker",
        "--network",
        "none",
    ]);
    let out = nobody(&[
        "exec",
        "r",
        "--",
        "sh",
        "-c",
        r#"curl -sS -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' "$ANTHROPIC_BASE_URL/v1/messages""#,
    ]);
    assert!(out.contains("\"n\":4"), "{out}");
    assert_eq!(t.stub.seen()[0].api_key.as_deref(), Some(t.key.as_str()));
}
