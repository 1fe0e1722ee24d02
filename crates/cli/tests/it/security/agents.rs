//! Agents' configuration on its way into a box: no credential of the host's configuration
//! arrives (an allow-list of keys and entries, what was left out named), no box's writes
//! reach another box or the host, and no symlink a box plants is followed by the sync.
//! Each test runs as root and rootless (as `nobody`). The agents' own commands are run with
//! `--version` only (or are missing): the sync happens before, and no model API is used.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::Sec;
use crate::common::{code, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A host user (`HOME`) with agents' configuration, a project, and an agentbox home; run as
/// root or as `nobody`.
struct Agents {
    s: Sec,
    user: PathBuf,
    proj: PathBuf,
    /// The agentbox home (boxes, mirrors) — searched for credentials too.
    abhome: PathBuf,
    rootless: bool,
}

impl Agents {
    fn new(test: &str, rootless: bool) -> Option<Agents> {
        if !require_root(test) {
            return None;
        }
        let s = Sec { env: Env::new() };
        let root = s.env.home.path().to_owned();
        let (user, proj) = (root.join("user"), root.join("proj"));
        write(&proj.join("README"), "readme\n");
        let abhome = s.env.path("home");
        std::fs::create_dir_all(&abhome).expect("mkdir");
        Some(Agents {
            s,
            user,
            proj,
            abhome,
            rootless,
        })
    }

    /// Hand the user's files, the project and the home to `nobody` (rootless): call after
    /// the host's files are written.
    fn own(&self) {
        if !self.rootless {
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let root = self.s.env.home.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for p in [&self.user, &self.proj, &self.abhome] {
            crate::common::chown_nobody(p);
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = if self.rootless {
            let exe = self.abhome.join("agentbox");
            if !exe.exists() {
                std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), &exe).expect("copy the binary");
            }
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(exe)
                .args(args)
                .env("AGENTBOX_HOME", &self.abhome);
            c
        } else {
            self.s.env.command(args)
        };
        c.env("HOME", &self.user).current_dir(&self.proj);
        c.output().expect("run agentbox")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn create(&self, name: &str) {
        self.ok(&["create", name, "--from", self.proj.to_str().expect("utf-8")]);
    }

    /// Launch `agent` in box `name` (its command asked for its version only; a missing
    /// command is fine: the sync comes first). Returns stderr, where the sync reports.
    fn launch(&self, agent: &str, name: &str) -> String {
        let out = self.run(&[agent, name, "--ask", "--", "--version"]);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{agent}'s configuration:")),
            "the sync did not run: {err}"
        );
        err
    }

    fn sh(&self, name: &str, script: &str) -> String {
        self.ok(&["exec", name, "--", "sh", "-c", script])
    }
}

/// Every file below `dir` (symlinks not followed, the test's copy of the binary left out)
/// whose content holds one of `needles`, with the needle.
fn files_holding(dir: &Path, needles: &[&str]) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() && e.path() != dir.join("agentbox") {
                let Ok(bytes) = std::fs::read(e.path()) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&bytes);
                for n in needles {
                    if text.contains(n) {
                        out.push((e.path(), (*n).to_owned()));
                    }
                }
            }
        }
    }
    out
}

/// The ten kinds of credential the review planted, each a unique value, in the host user's
/// configuration of Claude Code, Codex and OpenCode (with harmless keys beside them).
fn plant_credentials(a: &Agents) -> Vec<(&'static str, String)> {
    let id = agentbox_core::id::new_id();
    let k = |kind: &str| format!("SECRET{kind}x{}", &id[..12]);
    let creds = vec![
        ("claude primaryApiKey", k("1")),
        ("claude oauthAccount", k("2")),
        ("claude mcpServers env", k("3")),
        ("claude project mcpServers env", k("4")),
        ("claude settings env token", k("5")),
        ("claude apiKeyHelper", k("6")),
        ("codex provider bearer token", k("7")),
        ("codex http_headers", k("8")),
        ("codex mcp env", k("9")),
        ("opencode provider apiKey", k("10")),
    ];
    let c = |i: usize| creds[i].1.clone();
    let proj = std::fs::canonicalize(&a.proj).expect("canonical");
    write(
        &a.user.join(".claude.json"),
        &serde_json::json!({
            "theme": "dark-daltonized",
            "primaryApiKey": c(0),
            "oauthAccount": {"emailAddress": "u@example.com", "accessToken": c(1)},
            "mcpServers": {"db": {"command": "npx", "args": ["db-mcp"], "env": {"DB_TOKEN": c(2)}}},
            "projects": {proj.to_string_lossy(): {
                "hasTrustDialogAccepted": true,
                "mcpServers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": c(3)}}}
            }}
        })
        .to_string(),
    );
    // Claude's own backups of that file, and its credential store.
    write(
        &a.user.join(".claude/backups/.claude.json.backup.1"),
        &format!("{{\"primaryApiKey\":\"{}\"}}", c(0)),
    );
    write(
        &a.user.join(".claude/.credentials.json"),
        &format!("{{\"claudeAiOauth\":{{\"accessToken\":\"{}\"}}}}", c(1)),
    );
    write(
        &a.user.join(".claude/settings.json"),
        &serde_json::json!({
            "model": "opus-harmless",
            "env": {"ANTHROPIC_AUTH_TOKEN": c(4), "BASH_DEFAULT_TIMEOUT_MS": "60000"},
            "apiKeyHelper": format!("echo {}", c(5)),
        })
        .to_string(),
    );
    write(&a.user.join(".claude/agents/reviewer.md"), "# reviewer\n");
    write(
        &a.user.join(".codex/config.toml"),
        &format!(
            "model = \"gpt-harmless\"\n\n[model_providers.corp]\nname = \"Corp\"\nbase_url = \"https://llm.corp.example\"\nexperimental_bearer_token = \"{}\"\nhttp_headers = {{ \"X-Api-Key\" = \"{}\" }}\n\n[mcp_servers.gh]\ncommand = \"gh-mcp\"\nenv = {{ GITHUB_TOKEN = \"{}\" }}\n",
            c(6),
            c(7),
            c(8)
        ),
    );
    write(
        &a.user.join(".codex/auth.json"),
        &format!("{{\"OPENAI_API_KEY\":\"{}\"}}", c(6)),
    );
    write(
        &a.user.join(".config/opencode/opencode.json"),
        &serde_json::json!({
            "theme": "tokyonight-harmless",
            "provider": {"anthropic": {"options": {"apiKey": c(9)}}},
        })
        .to_string(),
    );
    write(
        &a.user.join(".local/share/opencode/auth.json"),
        &format!(
            "{{\"anthropic\":{{\"type\":\"api\",\"key\":\"{}\"}}}}",
            c(9)
        ),
    );
    creds
}

fn no_credential_of_the_host_reaches_a_box(test: &str, rootless: bool) {
    let Some(a) = Agents::new(test, rootless) else {
        return;
    };
    let creds = plant_credentials(&a);
    a.own();
    a.create("cred");
    let claude = a.launch("claude", "cred");
    a.launch("codex", "cred");
    a.launch("opencode", "cred");
    // What was left out is named, never its value.
    for key in [
        ".claude.json:primaryApiKey",
        ".claude.json:oauthAccount",
        ".claude/.credentials.json",
        ".claude/backups",
        ".claude/settings.json:apiKeyHelper",
        ".claude/settings.json:env.ANTHROPIC_AUTH_TOKEN",
    ] {
        assert!(claude.contains(key), "{key} not reported: {claude}");
    }
    for (kind, value) in &creds {
        assert!(!claude.contains(value.as_str()), "{kind} printed: {claude}");
        // Searched for in two halves, so the search's own command line cannot match.
        let (x, y) = value.split_at(value.len() / 2);
        let found = a.sh(
            "cred",
            &format!(
                "k=\"{x}\"\"{y}\"; grep -rl \"$k\" /root /workspace /run/agentbox /tmp /etc 2>/dev/null; true"
            ),
        );
        assert_eq!(found, "", "{kind} reached the box: {found}");
    }
    // Nor the agentbox home on the host (the mirrors, the box's layers).
    let values: Vec<&str> = creds.iter().map(|(_, v)| v.as_str()).collect();
    let held = files_holding(&a.abhome, &values);
    assert!(
        held.is_empty(),
        "credentials in the agentbox home: {held:?}"
    );
    // The harmless keys did arrive.
    let inside = a.sh(
        "cred",
        "cat /root/.claude.json /root/.claude/settings.json /root/.codex/config.toml /root/.config/opencode/opencode.json /root/.claude/agents/reviewer.md",
    );
    for harmless in [
        "dark-daltonized",
        "opus-harmless",
        "BASH_DEFAULT_TIMEOUT_MS",
        "db-mcp",
        "gpt-harmless",
        "https://llm.corp.example",
        "tokyonight-harmless",
        "# reviewer",
    ] {
        assert!(inside.contains(harmless), "{harmless} is missing: {inside}");
    }
    let claude_json: serde_json::Value =
        serde_json::from_str(&a.sh("cred", "cat /root/.claude.json")).expect("json");
    assert_eq!(
        claude_json["projects"]["/workspace"]["hasTrustDialogAccepted"], true,
        "{claude_json}"
    );
}

#[test]
fn no_credential_of_the_host_reaches_a_box_root() {
    no_credential_of_the_host_reaches_a_box("no_credential_of_the_host_reaches_a_box_root", false);
}

#[test]
fn no_credential_of_the_host_reaches_a_box_rootless() {
    no_credential_of_the_host_reaches_a_box(
        "no_credential_of_the_host_reaches_a_box_rootless",
        true,
    );
}

fn one_boxs_agent_configuration_never_reaches_another(test: &str, rootless: bool) {
    let Some(a) = Agents::new(test, rootless) else {
        return;
    };
    write(
        &a.user.join(".claude/settings.json"),
        "{\"model\":\"opus\"}",
    );
    write(&a.user.join(".claude.json"), "{\"theme\":\"dark\"}");
    a.own();
    let host_settings =
        std::fs::read_to_string(a.user.join(".claude/settings.json")).expect("read");
    a.create("boxa");
    a.create("boxb");
    a.launch("claude", "boxa");
    // Box A's agent plants a SessionStart hook, an agent, a hook script and a key, as one
    // with a shell would, in every place its configuration is.
    let wrote = a.sh(
        "boxa",
        r#"cat > /root/.claude/settings.json <<'EOF'
{"model":"opus","hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /workspace/PWNED"}]}]}}
EOF
mkdir -p /root/.claude/agents /root/.claude/hooks
echo evil > /root/.claude/agents/evil.md
echo 'touch /workspace/PWNED' > /root/.claude/hooks/evil.sh
echo '{"theme":"dark","primaryApiKey":"planted"}' > /root/.claude.json
for d in /run/agentbox/agent-home /run/agentbox/ctl/agent-config/claude/home/.claude; do
  touch "$d/planted" 2>/dev/null && echo "wrote $d"
done; true"#,
    );
    assert_eq!(wrote, "", "the host's mirror or a shared copy is writable");
    assert_eq!(
        a.sh(
            "boxa",
            "test -e /run/agentbox/agent-home && echo shared; true"
        ),
        "",
        "a writable copy shared by the home's boxes"
    );
    a.launch("claude", "boxb");
    let seen = a.sh(
        "boxb",
        "grep -rl -e SessionStart -e evil -e planted /root/.claude /root/.claude.json 2>/dev/null; ls /root/.claude/agents /root/.claude/hooks 2>/dev/null; true",
    );
    assert_eq!(seen, "", "box B sees box A's writes");
    // The host's configuration is as it was, and holds nothing of box A's.
    assert_eq!(
        std::fs::read_to_string(a.user.join(".claude/settings.json")).expect("read"),
        host_settings
    );
    assert!(!a.user.join(".claude/agents").exists() && !a.user.join(".claude/hooks").exists());
    assert!(files_holding(&a.user, &["planted"]).is_empty());
    assert!(!a.abhome.join("agent-home").exists());
}

#[test]
fn one_boxs_agent_configuration_never_reaches_another_root() {
    one_boxs_agent_configuration_never_reaches_another(
        "one_boxs_agent_configuration_never_reaches_another_root",
        false,
    );
}

#[test]
fn one_boxs_agent_configuration_never_reaches_another_rootless() {
    one_boxs_agent_configuration_never_reaches_another(
        "one_boxs_agent_configuration_never_reaches_another_rootless",
        true,
    );
}

fn the_agent_sync_follows_no_symlink_a_box_plants(test: &str, rootless: bool) {
    let Some(a) = Agents::new(test, rootless) else {
        return;
    };
    write(
        &a.user.join(".claude/settings.json"),
        "{\"model\":\"opus\"}",
    );
    write(&a.user.join(".claude/agents/a.md"), "agent\n");
    write(&a.user.join(".claude/CLAUDE.md"), "rules\n");
    write(&a.user.join(".claude.json"), "{\"theme\":\"dark\"}");
    // Host files a box names by their host paths (which the box does not see): one that
    // exists, one that does not.
    let victim = a.s.env.path("victim");
    write(&victim, "host file\n");
    let absent = a.s.env.path("absent");
    a.own();
    a.create("links");
    a.launch("claude", "links");
    a.sh(
        "links",
        &format!(
            "cd /root && rm -rf .claude/agents .claude/settings.json .claude/CLAUDE.md .claude.json
             ln -s /workspace/victim-dir .claude/agents
             ln -s /workspace/victim-file .claude/settings.json
             ln -s {} .claude/CLAUDE.md
             ln -s {} .claude.json",
            absent.display(),
            victim.display()
        ),
    );
    // The host's files change, so the next launch writes each of them.
    write(
        &a.user.join(".claude/settings.json"),
        "{\"model\":\"sonnet\"}",
    );
    write(&a.user.join(".claude/agents/a.md"), "agent v2\n");
    write(&a.user.join(".claude/CLAUDE.md"), "rules v2\n");
    write(&a.user.join(".claude.json"), "{\"theme\":\"light\"}");
    a.own();
    a.launch("claude", "links");
    assert_eq!(
        a.sh(
            "links",
            "ls -A /workspace; for f in .claude/agents .claude/settings.json .claude/CLAUDE.md .claude.json; do test -L /root/$f && echo \"$f is a link\"; done; cat /root/.claude/settings.json /root/.claude/agents/a.md /root/.claude/CLAUDE.md"
        ),
        "README\n{\n  \"model\": \"sonnet\"\n}agent v2\nrules v2\n",
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("read"),
        "host file\n"
    );
    assert!(!absent.exists(), "the sync created a host file");
}

#[test]
fn the_agent_sync_follows_no_symlink_a_box_plants_root() {
    the_agent_sync_follows_no_symlink_a_box_plants(
        "the_agent_sync_follows_no_symlink_a_box_plants_root",
        false,
    );
}

#[test]
fn the_agent_sync_follows_no_symlink_a_box_plants_rootless() {
    the_agent_sync_follows_no_symlink_a_box_plants(
        "the_agent_sync_follows_no_symlink_a_box_plants_rootless",
        true,
    );
}
