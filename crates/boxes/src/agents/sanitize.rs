//! What of an agent's host configuration is changed on its way into a box (the host's own
//! files are never changed): only the keys [`super::allow`] lists are kept (every other key
//! dropped and named), references to host-only paths are dropped, host-specific markers
//! removed, and the box's project path (`/workspace`) given the host project's settings and
//! trust.

use std::path::Path;

use serde_json::Value;

use super::allow::{self, Rule};

/// A configuration file's text for a box, and the key paths left out (never their values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clean {
    pub text: String,
    pub dropped: Vec<String>,
}

/// Whether `text` names a path that exists only on the host: below the host user's home
/// (which a box does not see, except the toolchains it is shown), or in a macOS location.
fn host_only(text: &str, host_home: &Path) -> bool {
    let home = host_home.to_string_lossy();
    let home = home.trim_end_matches('/');
    (!home.is_empty() && home != "/" && text.contains(&format!("{home}/")))
        || ["/Applications/", "/opt/homebrew/", "/Users/", "/Library/"]
            .iter()
            .any(|p| text.contains(p))
}

fn filtered(v: &mut Value, rule: &Rule) -> Vec<String> {
    let mut dropped = Vec::new();
    allow::filter(v, rule, "", &mut dropped);
    dropped
}

/// `~/.claude.json` for a box: the keys of [`allow::CLAUDE_JSON`] only (no `primaryApiKey`,
/// `oauthAccount`, MCP `env`…), and of the host's projects only the box's own
/// (`projects[<project>]`: its MCP servers, trust), under `/workspace`, where the box has
/// the project. `None`: the text does not parse (the file is left out).
pub fn claude_json(text: &str, project: Option<&Path>) -> Option<Clean> {
    let mut v: Value = serde_json::from_str(text).ok()?;
    let obj = v.as_object_mut()?;
    let mut others = 0usize;
    if let Some(projects) = obj.remove("projects") {
        let mut kept = serde_json::Map::new();
        if let Value::Object(projects) = projects {
            for (path, entry) in projects {
                if project.is_some_and(|p| *p.to_string_lossy() == path) {
                    kept.insert(crate::records::record::WORKSPACE.to_owned(), entry);
                } else {
                    // Other projects of the host: none of the box's business (counted, not
                    // named: a home has many).
                    others += 1;
                }
            }
        }
        obj.insert("projects".into(), Value::Object(kept));
    }
    let mut dropped = filtered(&mut v, &allow::CLAUDE_JSON);
    if others > 0 {
        dropped.push(format!("projects ({others} other project(s))"));
    }
    Some(Clean {
        text: serde_json::to_string_pretty(&v).ok()?,
        dropped,
    })
}

/// `~/.claude/settings.json` for a box: the keys of [`allow::CLAUDE_SETTINGS`] only (no
/// `apiKeyHelper`, no `env` token); hooks whose command names a host-only path are dropped
/// (they would fail on every event in the box); a matcher left without hooks, and an event
/// left without matchers, go too.
pub fn claude_settings(text: &str, host_home: &Path) -> Option<Clean> {
    let mut v: Value = serde_json::from_str(text).ok()?;
    let dropped = filtered(&mut v, &allow::CLAUDE_SETTINGS);
    if let Some(Value::Object(events)) = v.get_mut("hooks") {
        for groups in events.values_mut() {
            if let Value::Array(groups) = groups {
                for g in groups.iter_mut() {
                    if let Some(Value::Array(hooks)) = g.get_mut("hooks") {
                        hooks.retain(|h| {
                            !h.get("command")
                                .and_then(Value::as_str)
                                .is_some_and(|c| host_only(c, host_home))
                        });
                    }
                }
                groups.retain(|g| {
                    g.get("hooks")
                        .and_then(Value::as_array)
                        .is_none_or(|h| !h.is_empty())
                });
            }
        }
        events.retain(|_, groups| groups.as_array().is_none_or(|g| !g.is_empty()));
    }
    Some(Clean {
        text: serde_json::to_string_pretty(&v).ok()?,
        dropped,
    })
}

/// OpenCode's `opencode.json` for a box: the keys of [`allow::OPENCODE_CONFIG`] only (no
/// provider `apiKey`, MCP `environment` or `headers`). JSON with comments (`.jsonc`) is
/// read with its comments removed.
pub fn opencode_config(text: &str) -> Option<Clean> {
    let mut v: Value = serde_json::from_str(text)
        .ok()
        .or_else(|| serde_json::from_str(&strip_jsonc(text)).ok())?;
    let dropped = filtered(&mut v, &allow::OPENCODE_CONFIG);
    Some(Clean {
        text: serde_json::to_string_pretty(&v).ok()?,
        dropped,
    })
}

/// `text` without `//` and `/* */` comments (outside strings) and trailing commas.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_str = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
            }
            (',', _) => {
                // A trailing comma: the next non-space is a closing bracket.
                let rest: String = chars.clone().collect();
                let next = rest.trim_start().chars().next();
                if !matches!(next, Some('}' | ']')) {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Codex's `config.toml` for a box: the keys of [`allow::CODEX_CONFIG`] only (no bearer
/// token, `http_headers` or MCP `env`), MCP servers, `notify` and local marketplaces that run
/// host-only programs removed, and `/workspace` trusted (so Codex does not ask).
pub fn codex_config(text: &str, host_home: &Path) -> Option<Clean> {
    let t: toml::Table = text.parse().ok()?;
    let mut v = serde_json::to_value(&t).ok()?;
    let dropped = filtered(&mut v, &allow::CODEX_CONFIG);
    let mut t: toml::Table = serde_json::from_value(v).ok()?;
    let names_host = |v: &toml::Value| host_only(&v.to_string(), host_home);
    if let Some(toml::Value::Table(servers)) = t.get_mut("mcp_servers") {
        servers.retain(|_, s| !names_host(s));
    }
    if t.get("notify").is_some_and(&names_host) {
        t.remove("notify");
    }
    if let Some(toml::Value::Table(m)) = t.get_mut("marketplaces") {
        m.retain(|_, s| !names_host(s));
    }
    trust_workspace(&mut t);
    Some(Clean {
        text: toml::to_string(&t).ok()?,
        dropped,
    })
}

/// `[projects."/workspace"] trust_level = "trusted"`.
fn trust_workspace(t: &mut toml::Table) {
    let projects = t
        .entry("projects")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(p) = projects {
        let ws = p
            .entry(crate::records::record::WORKSPACE)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(ws) = ws {
            ws.insert("trust_level".into(), toml::Value::String("trusted".into()));
        }
    }
}

/// The box's own `config.toml` (`boxed`) merged with the host's (`host`): every key the
/// host has wins, tables merged key by key; what only the box has stays (an in-box
/// `codex mcp add` survives the next launch).
pub fn merge_toml(host: &str, boxed: &str) -> Option<String> {
    fn merge(into: &mut toml::Table, from: toml::Table) {
        for (k, v) in from {
            match (into.get_mut(&k), v) {
                (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
                (_, v) => {
                    into.insert(k, v);
                }
            }
        }
    }
    let host: toml::Table = host.parse().ok()?;
    let mut out: toml::Table = boxed.parse().unwrap_or_default();
    merge(&mut out, host);
    toml::to_string(&out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_json_drops_install_method_and_aliases_the_project() {
        let host = r#"{"installMethod":"native","projects":{"/home/u/proj":{"mcpServers":{"db":{}},"hasTrustDialogAccepted":true},"/home/u/other":{}},"x":1,"theme":"dark"}"#;
        let clean = claude_json(host, Some(Path::new("/home/u/proj"))).expect("json");
        let out: Value = serde_json::from_str(&clean.text).expect("valid");
        assert!(out.get("installMethod").is_none());
        assert!(out["projects"].get("/home/u/proj").is_none());
        assert_eq!(
            out["projects"]["/workspace"]["hasTrustDialogAccepted"],
            true
        );
        assert!(out["projects"]["/workspace"]["mcpServers"]["db"].is_object());
        assert!(out.get("x").is_none());
        assert_eq!(out["theme"], "dark");
        let mut dropped = clean.dropped;
        dropped.sort();
        assert_eq!(
            dropped,
            ["installMethod", "projects (1 other project(s))", "x"]
        );
    }

    #[test]
    fn hooks_that_run_host_only_programs_are_dropped() {
        let settings = r#"{"hooks":{
            "Stop":[{"matcher":"","hooks":[{"type":"command","command":"/home/u/bin/cc-status"}]}],
            "PostToolUse":[{"matcher":"Edit","hooks":[
                {"type":"command","command":"npx prettier --write"},
                {"type":"command","command":"/home/u/.local/bin/notify"}]}]},
            "model":"opus"}"#;
        let out: Value = serde_json::from_str(
            &claude_settings(settings, Path::new("/home/u"))
                .expect("json")
                .text,
        )
        .expect("valid");
        assert!(out["hooks"].get("Stop").is_none(), "{out}");
        let kept = &out["hooks"]["PostToolUse"][0]["hooks"];
        assert_eq!(kept.as_array().map(Vec::len), Some(1));
        assert_eq!(kept[0]["command"], "npx prettier --write");
        assert_eq!(out["model"], "opus");
    }

    #[test]
    fn codex_config_loses_host_programs_and_trusts_the_workspace() {
        let host = r#"
model = "gpt-5"
notify = ["/Applications/Codex.app/notify"]
[mcp_servers.node_repl]
command = "/Applications/Codex.app/Contents/node_repl"
[mcp_servers.docs]
command = "npx"
args = ["docs-mcp"]
[projects."/home/u/proj"]
trust_level = "trusted"
"#;
        let out: toml::Table = codex_config(host, Path::new("/home/u"))
            .expect("toml")
            .text
            .parse()
            .expect("valid");
        assert!(out.get("notify").is_none());
        let servers = out["mcp_servers"].as_table().expect("table");
        assert!(servers.contains_key("docs") && !servers.contains_key("node_repl"));
        assert_eq!(
            out["projects"]["/workspace"]["trust_level"].as_str(),
            Some("trusted")
        );
        assert_eq!(out["model"].as_str(), Some("gpt-5"));
    }

    #[test]
    fn codex_and_opencode_credentials_are_dropped() {
        let host = r#"
model = "gpt-5"
[model_providers.corp]
base_url = "https://llm.corp"
experimental_bearer_token = "BEARER"
http_headers = { "X-Key" = "HDR" }
[mcp_servers.gh]
command = "gh-mcp"
env = { GITHUB_TOKEN = "GHTOK" }
"#;
        let clean = codex_config(host, Path::new("/home/u")).expect("toml");
        for s in ["BEARER", "HDR", "GHTOK"] {
            assert!(!clean.text.contains(s), "{}", clean.text);
        }
        assert!(clean.text.contains("https://llm.corp") && clean.text.contains("gpt-5"));
        let mut d = clean.dropped;
        d.sort();
        assert_eq!(
            d,
            [
                "mcp_servers.gh.env",
                "model_providers.corp.experimental_bearer_token",
                "model_providers.corp.http_headers"
            ]
        );
        let oc = r#"{
  // a comment, "with a quote"
  "theme": "tokyonight", /* block */
  "provider": {"anthropic": {"options": {"apiKey": "OCKEY", "baseURL": "https://x/"}}},
  "mcp": {"m": {"type": "local", "command": ["m"], "environment": {"T": "MCPENV"}},},
}"#;
        let clean = opencode_config(oc).expect("jsonc");
        assert!(
            !clean.text.contains("OCKEY") && !clean.text.contains("MCPENV"),
            "{}",
            clean.text
        );
        assert!(clean.text.contains("tokyonight") && clean.text.contains("https://x/"));
        assert_eq!(
            clean.dropped,
            ["mcp.m.environment.T", "provider.anthropic.options.apiKey"]
        );
    }

    #[test]
    fn the_boxs_own_codex_keys_survive_and_the_host_wins_on_shared_ones() {
        let merged: toml::Table = merge_toml(
            "model = \"host\"\n[mcp_servers.a]\ncommand = \"x\"\n",
            "model = \"box\"\nextra = 1\n[mcp_servers.b]\ncommand = \"y\"\n",
        )
        .expect("merge")
        .parse()
        .expect("valid");
        assert_eq!(merged["model"].as_str(), Some("host"));
        assert_eq!(merged["extra"].as_integer(), Some(1));
        let s = merged["mcp_servers"].as_table().expect("table");
        assert!(s.contains_key("a") && s.contains_key("b"));
    }
}
