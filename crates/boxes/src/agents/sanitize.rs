//! What of an agent's host configuration is changed on its way into a box (the host's own
//! files are never changed): references to host-only paths are dropped, host-specific
//! markers removed, and the box's project path (`/workspace`) given the host project's
//! settings and trust.

use std::path::Path;

use serde_json::Value;

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

/// `~/.claude.json` for a box: `installMethod` removed (the box's Claude Code detects its
/// own), and the host project's entry (`projects[<project>]`: its MCP servers, trust,
/// history) also under `/workspace`, where the box has the project.
pub fn claude_json(text: &str, project: Option<&Path>) -> Option<String> {
    let mut v: Value = serde_json::from_str(text).ok()?;
    let obj = v.as_object_mut()?;
    obj.remove("installMethod");
    if let (Some(p), Some(Value::Object(projects))) = (project, obj.get_mut("projects")) {
        if let Some(entry) = projects.get(&*p.to_string_lossy()).cloned() {
            projects.insert(crate::record::WORKSPACE.to_owned(), entry);
        }
    }
    serde_json::to_string_pretty(&v).ok()
}

/// `~/.claude/settings.json` for a box: hooks whose command names a host-only path are
/// dropped (they would fail on every event in the box); a matcher left without hooks, and
/// an event left without matchers, go too.
pub fn claude_settings(text: &str, host_home: &Path) -> Option<String> {
    let mut v: Value = serde_json::from_str(text).ok()?;
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
    serde_json::to_string_pretty(&v).ok()
}

/// Codex's `config.toml` for a box: MCP servers, `notify` and local marketplaces that run
/// host-only programs removed, and `/workspace` trusted (so Codex does not ask).
pub fn codex_config(text: &str, host_home: &Path) -> Option<String> {
    let mut t: toml::Table = text.parse().ok()?;
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
    toml::to_string(&t).ok()
}

/// `[projects."/workspace"] trust_level = "trusted"`.
fn trust_workspace(t: &mut toml::Table) {
    let projects = t
        .entry("projects")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(p) = projects {
        let ws = p
            .entry(crate::record::WORKSPACE)
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
        let host = r#"{"installMethod":"native","projects":{"/home/u/proj":{"mcpServers":{"db":{}},"hasTrustDialogAccepted":true}},"x":1}"#;
        let out: Value = serde_json::from_str(
            &claude_json(host, Some(Path::new("/home/u/proj"))).expect("json"),
        )
        .expect("valid");
        assert!(out.get("installMethod").is_none());
        assert_eq!(
            out["projects"]["/workspace"],
            out["projects"]["/home/u/proj"]
        );
        assert_eq!(
            out["projects"]["/workspace"]["hasTrustDialogAccepted"],
            true
        );
        assert_eq!(out["x"], 1);
    }

    #[test]
    fn hooks_that_run_host_only_programs_are_dropped() {
        let settings = r#"{"hooks":{
            "Stop":[{"matcher":"","hooks":[{"type":"command","command":"/home/u/bin/cc-status"}]}],
            "PostToolUse":[{"matcher":"Edit","hooks":[
                {"type":"command","command":"npx prettier --write"},
                {"type":"command","command":"/home/u/.local/bin/notify"}]}]},
            "model":"opus"}"#;
        let out: Value =
            serde_json::from_str(&claude_settings(settings, Path::new("/home/u")).expect("json"))
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
