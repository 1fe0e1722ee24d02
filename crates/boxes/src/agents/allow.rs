//! Which keys of an agent's configuration files enter a box: an **allow-list** per file,
//! of keys known to carry no credential. Everything else is dropped and named (its key path,
//! never its value), so a key an agent adds tomorrow — a token under a new name — stays on
//! the host until it is reviewed and listed here.
//!
//! Invariant: a value is copied only where every key on its path is listed; a listed key
//! whose value has an unexpected shape (an object where text was expected…) is kept only
//! when its rule is [`Rule::Keep`], which is given only to keys whose whole value is known
//! to be harmless (a theme, a model name, a list of allowed tools).

use serde_json::{Map, Value};

use crate::hostview::url::clean_url;

/// What of a value enters a box.
#[derive(Debug)]
pub enum Rule {
    /// The value as it is.
    Keep,
    /// An object: only these keys, each by its own rule (anything else is dropped).
    Fields(&'static [(&'static str, Rule)]),
    /// An object of user-chosen names (MCP servers by name): every entry, by this rule.
    Each(&'static Rule),
    /// Text that only names a variable (`{env:NAME}`, `${NAME}`, `$NAME`): where a value
    /// would be a credential, a reference to one is kept (the box has no such variable
    /// unless it is given one) and anything else dropped.
    Reference,
    /// A URL: kept without what would carry a credential — the user and password before
    /// the host (`https://user:TOKEN@host/`) and query parameters named like one (`?token=`,
    /// `api_key`, `sig` …) —, each part left out named like a dropped key.
    Url,
}

/// Whether `s` is only a reference to a variable, with no secret of its own.
fn is_reference(s: &str) -> bool {
    let name = s
        .strip_prefix("{env:")
        .and_then(|r| r.strip_suffix('}'))
        .or_else(|| s.strip_prefix("${").and_then(|r| r.strip_suffix('}')))
        .or_else(|| s.strip_prefix('$'));
    name.is_some_and(|n| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Filter `v` by `rule`; `path` names `v` (`mcpServers.db`), and every key dropped is added
/// to `dropped` by its full path.
pub fn filter(v: &mut Value, rule: &Rule, path: &str, dropped: &mut Vec<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    match rule {
        Rule::Keep => {}
        Rule::Fields(fields) => match v {
            Value::Object(obj) => {
                let keys: Vec<String> = obj.keys().cloned().collect();
                for k in keys {
                    match fields.iter().find(|(name, _)| *name == k) {
                        Some((_, r)) => {
                            if let Some(child) = obj.get_mut(&k) {
                                filter(child, r, &join(&k), dropped);
                                if child.is_null() && matches!(r, Rule::Reference) {
                                    obj.remove(&k);
                                }
                            }
                        }
                        None => {
                            obj.remove(&k);
                            dropped.push(join(&k));
                        }
                    }
                }
            }
            // A listed key of an unexpected shape: not what the rule knows to be harmless.
            _ => drop_value(v, path, dropped),
        },
        Rule::Each(each) => match v {
            Value::Object(obj) => {
                for (k, child) in obj.iter_mut() {
                    filter(child, each, &join(k), dropped);
                }
                // A value a rule dropped as a whole goes with its key.
                obj.retain(|_, c| !matches!(c, Value::Null));
            }
            _ => drop_value(v, path, dropped),
        },
        Rule::Url => match v.as_str().map(clean_url) {
            Some((clean, removed)) => {
                for part in removed {
                    dropped.push(format!("{path} ({part})"));
                }
                *v = Value::String(clean);
            }
            None => drop_value(v, path, dropped),
        },
        Rule::Reference => {
            if !v.as_str().is_some_and(is_reference) {
                *v = Value::Null;
                dropped.push(path.to_owned());
            }
        }
    }
}

fn drop_value(v: &mut Value, path: &str, dropped: &mut Vec<String>) {
    *v = Value::Object(Map::new());
    dropped.push(path.to_owned());
}

/// Variables of Claude Code's `settings.json` `env` known to be settings, not credentials.
const CLAUDE_ENV: &[(&str, Rule)] = &[
    ("ANTHROPIC_MODEL", Rule::Keep),
    ("ANTHROPIC_SMALL_FAST_MODEL", Rule::Keep),
    ("ANTHROPIC_DEFAULT_OPUS_MODEL", Rule::Keep),
    ("ANTHROPIC_DEFAULT_SONNET_MODEL", Rule::Keep),
    ("ANTHROPIC_DEFAULT_HAIKU_MODEL", Rule::Keep),
    ("CLAUDE_CODE_SUBAGENT_MODEL", Rule::Keep),
    ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", Rule::Keep),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", Rule::Keep),
    ("CLAUDE_CODE_DISABLE_TERMINAL_TITLE", Rule::Keep),
    ("BASH_DEFAULT_TIMEOUT_MS", Rule::Keep),
    ("BASH_MAX_TIMEOUT_MS", Rule::Keep),
    ("BASH_MAX_OUTPUT_LENGTH", Rule::Keep),
    ("MAX_THINKING_TOKENS", Rule::Keep),
    ("MAX_MCP_OUTPUT_TOKENS", Rule::Keep),
    ("MCP_TIMEOUT", Rule::Keep),
    ("MCP_TOOL_TIMEOUT", Rule::Keep),
    ("DISABLE_TELEMETRY", Rule::Keep),
    ("DISABLE_ERROR_REPORTING", Rule::Keep),
    ("DISABLE_AUTOUPDATER", Rule::Keep),
    ("DISABLE_BUG_COMMAND", Rule::Keep),
    ("DISABLE_COST_WARNINGS", Rule::Keep),
    ("DISABLE_NON_ESSENTIAL_MODEL_CALLS", Rule::Keep),
    ("USE_BUILTIN_RIPGREP", Rule::Keep),
];

/// One MCP server of Claude Code (`mcpServers.<name>`): how it is started or reached, never
/// its `env` or `headers` (where its tokens go).
const CLAUDE_MCP_SERVER: Rule = Rule::Fields(&[
    ("type", Rule::Keep),
    ("command", Rule::Keep),
    ("args", Rule::Keep),
    ("url", Rule::Url),
    ("timeout", Rule::Keep),
    ("env", Rule::Each(&Rule::Reference)),
]);

/// The per-project entry of `~/.claude.json` (`projects.<path>`).
const CLAUDE_PROJECT: Rule = Rule::Fields(&[
    ("allowedTools", Rule::Keep),
    ("hasTrustDialogAccepted", Rule::Keep),
    ("hasCompletedProjectOnboarding", Rule::Keep),
    ("projectOnboardingSeenCount", Rule::Keep),
    ("hasClaudeMdExternalIncludesApproved", Rule::Keep),
    ("hasClaudeMdExternalIncludesWarningShown", Rule::Keep),
    ("enabledMcpjsonServers", Rule::Keep),
    ("disabledMcpjsonServers", Rule::Keep),
    ("mcpServers", Rule::Each(&CLAUDE_MCP_SERVER)),
    ("ignorePatterns", Rule::Keep),
]);

/// `~/.claude.json` (its `projects` are handled by [`super::sanitize::claude_json`]: only
/// the box's project, under `/workspace`). Not listed, so dropped: `primaryApiKey`,
/// `oauthAccount`, `customApiKeyResponses`, `userID`, caches.
pub const CLAUDE_JSON: Rule = Rule::Fields(&[
    ("theme", Rule::Keep),
    ("editorMode", Rule::Keep),
    ("verbose", Rule::Keep),
    ("hasCompletedOnboarding", Rule::Keep),
    ("lastOnboardingVersion", Rule::Keep),
    ("preferredNotifChannel", Rule::Keep),
    ("autoCompactEnabled", Rule::Keep),
    ("diffTool", Rule::Keep),
    ("hasSeenTasksHint", Rule::Keep),
    ("bypassPermissionsModeAccepted", Rule::Keep),
    ("shiftEnterKeyBindingInstalled", Rule::Keep),
    ("hasUsedBackslashReturn", Rule::Keep),
    ("hasAcknowledgedCostThreshold", Rule::Keep),
    ("tipsHistory", Rule::Keep),
    ("numStartups", Rule::Keep),
    ("todoFeatureEnabled", Rule::Keep),
    ("messageIdleNotifThresholdMs", Rule::Keep),
    ("mcpServers", Rule::Each(&CLAUDE_MCP_SERVER)),
    ("projects", Rule::Each(&CLAUDE_PROJECT)),
]);

/// Claude Code's `permissions`.
const CLAUDE_PERMISSIONS: Rule = Rule::Fields(&[
    ("allow", Rule::Keep),
    ("deny", Rule::Keep),
    ("ask", Rule::Keep),
    ("defaultMode", Rule::Keep),
    ("disableBypassPermissionsMode", Rule::Keep),
]);

/// `~/.claude/settings.json`. Not listed, so dropped: `apiKeyHelper`, `awsAuthRefresh`,
/// `awsCredentialExport`, `otelHeadersHelper`, `forceLoginOrgUUID`, and every `env` variable
/// not in [`CLAUDE_ENV`].
pub const CLAUDE_SETTINGS: Rule = Rule::Fields(&[
    ("$schema", Rule::Keep),
    ("model", Rule::Keep),
    ("theme", Rule::Keep),
    ("outputStyle", Rule::Keep),
    ("alwaysThinkingEnabled", Rule::Keep),
    ("includeCoAuthoredBy", Rule::Keep),
    ("cleanupPeriodDays", Rule::Keep),
    ("spinnerTipsEnabled", Rule::Keep),
    ("language", Rule::Keep),
    ("enableAllProjectMcpServers", Rule::Keep),
    ("enabledMcpjsonServers", Rule::Keep),
    ("disabledMcpjsonServers", Rule::Keep),
    ("enabledPlugins", Rule::Keep),
    ("extraKnownMarketplaces", Rule::Keep),
    ("permissions", CLAUDE_PERMISSIONS),
    ("hooks", Rule::Keep),
    ("statusLine", Rule::Keep),
    ("env", Rule::Fields(CLAUDE_ENV)),
]);

/// A model provider of Codex (`model_providers.<name>`): where it is, and the *name* of the
/// variable its key is read from (`env_key`), never a key, a bearer token or headers.
const CODEX_PROVIDER: Rule = Rule::Fields(&[
    ("name", Rule::Keep),
    ("base_url", Rule::Url),
    ("wire_api", Rule::Keep),
    ("env_key", Rule::Keep),
    ("env_key_instructions", Rule::Keep),
    ("request_max_retries", Rule::Keep),
    ("stream_max_retries", Rule::Keep),
    ("stream_idle_timeout_ms", Rule::Keep),
    ("requires_openai_auth", Rule::Keep),
]);

/// An MCP server of Codex (`mcp_servers.<name>`): never its `env`, `http_headers`,
/// `env_http_headers` or `bearer_token*`.
const CODEX_MCP_SERVER: Rule = Rule::Fields(&[
    ("command", Rule::Keep),
    ("args", Rule::Keep),
    ("url", Rule::Url),
    ("enabled", Rule::Keep),
    ("startup_timeout_sec", Rule::Keep),
    ("startup_timeout_ms", Rule::Keep),
    ("tool_timeout_sec", Rule::Keep),
    ("enabled_tools", Rule::Keep),
    ("disabled_tools", Rule::Keep),
]);

/// A profile of Codex (`profiles.<name>`): model choices only.
const CODEX_PROFILE: Rule = Rule::Fields(&[
    ("model", Rule::Keep),
    ("model_provider", Rule::Keep),
    ("model_reasoning_effort", Rule::Keep),
    ("model_reasoning_summary", Rule::Keep),
    ("model_verbosity", Rule::Keep),
    ("approval_policy", Rule::Keep),
    ("sandbox_mode", Rule::Keep),
]);

/// Codex's `config.toml` (as JSON). Not listed, so dropped: `experimental_bearer_token` and
/// `http_headers` anywhere, `shell_environment_policy` (its `set` holds values), `projects`
/// of the host (the box gets `/workspace` trusted instead).
pub const CODEX_CONFIG: Rule = Rule::Fields(&[
    ("model", Rule::Keep),
    ("model_provider", Rule::Keep),
    ("model_reasoning_effort", Rule::Keep),
    ("model_reasoning_summary", Rule::Keep),
    ("model_verbosity", Rule::Keep),
    ("model_context_window", Rule::Keep),
    ("model_max_output_tokens", Rule::Keep),
    ("model_auto_compact_token_limit", Rule::Keep),
    ("approval_policy", Rule::Keep),
    ("sandbox_mode", Rule::Keep),
    ("hide_agent_reasoning", Rule::Keep),
    ("show_raw_agent_reasoning", Rule::Keep),
    ("file_opener", Rule::Keep),
    ("project_doc_max_bytes", Rule::Keep),
    ("disable_response_storage", Rule::Keep),
    ("check_for_update_on_startup", Rule::Keep),
    ("notify", Rule::Keep),
    ("profile", Rule::Keep),
    ("profiles", Rule::Each(&CODEX_PROFILE)),
    ("model_providers", Rule::Each(&CODEX_PROVIDER)),
    ("mcp_servers", Rule::Each(&CODEX_MCP_SERVER)),
    ("features", Rule::Keep),
    ("tools", Rule::Keep),
    ("tui", Rule::Keep),
    ("history", Rule::Fields(&[("persistence", Rule::Keep)])),
    ("marketplaces", Rule::Keep),
]);

/// A provider of OpenCode (`provider.<name>`): its package and models, `options` without
/// `apiKey` or `headers`.
const OPENCODE_PROVIDER: Rule = Rule::Fields(&[
    ("npm", Rule::Keep),
    ("name", Rule::Keep),
    ("models", Rule::Keep),
    ("whitelist", Rule::Keep),
    ("blacklist", Rule::Keep),
    (
        "options",
        Rule::Fields(&[
            ("baseURL", Rule::Url),
            ("timeout", Rule::Keep),
            ("apiKey", Rule::Reference),
        ]),
    ),
]);

/// An MCP server of OpenCode (`mcp.<name>`): never its `environment`, `headers` or `oauth`.
const OPENCODE_MCP: Rule = Rule::Fields(&[
    ("type", Rule::Keep),
    ("command", Rule::Keep),
    ("url", Rule::Url),
    ("enabled", Rule::Keep),
    ("timeout", Rule::Keep),
    ("environment", Rule::Each(&Rule::Reference)),
]);

/// A formatter or language server of OpenCode: never its `environment`.
const OPENCODE_TOOL: Rule = Rule::Fields(&[
    ("command", Rule::Keep),
    ("extensions", Rule::Keep),
    ("disabled", Rule::Keep),
]);

/// OpenCode's `opencode.json` / `config.json`.
pub const OPENCODE_CONFIG: Rule = Rule::Fields(&[
    ("$schema", Rule::Keep),
    ("theme", Rule::Keep),
    ("model", Rule::Keep),
    ("small_model", Rule::Keep),
    ("default_agent", Rule::Keep),
    ("share", Rule::Keep),
    ("autoupdate", Rule::Keep),
    ("keybinds", Rule::Keep),
    ("tui", Rule::Keep),
    ("layout", Rule::Keep),
    ("snapshot", Rule::Keep),
    ("instructions", Rule::Keep),
    ("permission", Rule::Keep),
    ("tools", Rule::Keep),
    ("plugin", Rule::Keep),
    ("agent", Rule::Keep),
    ("mode", Rule::Keep),
    ("command", Rule::Keep),
    ("disabled_providers", Rule::Keep),
    ("enabled_providers", Rule::Keep),
    ("provider", Rule::Each(&OPENCODE_PROVIDER)),
    ("mcp", Rule::Each(&OPENCODE_MCP)),
    ("formatter", Rule::Each(&OPENCODE_TOOL)),
    ("lsp", Rule::Each(&OPENCODE_TOOL)),
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_keys_stay_and_every_drop_is_named_without_its_value() {
        let mut v: Value = serde_json::from_str(
            r#"{"theme":"dark","primaryApiKey":"sk-1","oauthAccount":{"email":"e"},
                "mcpServers":{"db":{"command":"x","env":{"TOKEN":"t"},"headers":{"A":"b"}}},
                "projects":{"/p":{"allowedTools":["Bash"],"mcpServers":{"m":{"url":"u","env":{"K":"v"}}},"history":["h"]}}}"#,
        )
        .expect("json");
        let mut dropped = Vec::new();
        filter(&mut v, &CLAUDE_JSON, "", &mut dropped);
        dropped.sort();
        assert_eq!(
            dropped,
            [
                "mcpServers.db.env.TOKEN",
                "mcpServers.db.headers",
                "oauthAccount",
                "primaryApiKey",
                "projects./p.history",
                "projects./p.mcpServers.m.env.K"
            ]
        );
        assert_eq!(v["theme"], "dark");
        assert_eq!(v["mcpServers"]["db"]["command"], "x");
        assert_eq!(v["projects"]["/p"]["allowedTools"][0], "Bash");
        let text = v.to_string();
        for secret in ["sk-1", "\"t\"", "\"v\"", "\"b\""] {
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn a_reference_to_a_variable_stays_and_a_value_goes() {
        let mut v: Value = serde_json::from_str(
            r#"{"mcpServers":{"a":{"env":{"R":"${GH_TOKEN}","S":"ghp_secret","D":"$X","N":1}}}}"#,
        )
        .expect("json");
        let mut dropped = Vec::new();
        filter(&mut v, &CLAUDE_JSON, "", &mut dropped);
        assert_eq!(
            v["mcpServers"]["a"]["env"],
            serde_json::json!({"R":"${GH_TOKEN}","D":"$X"})
        );
        dropped.sort();
        assert_eq!(dropped, ["mcpServers.a.env.N", "mcpServers.a.env.S"]);
        for (s, ok) in [
            ("{env:OPENAI_API_KEY}", true),
            ("${A_1}", true),
            ("$A", true),
            ("sk-$A", false),
            ("${A}x", false),
            ("$1", false),
            ("", false),
        ] {
            assert_eq!(is_reference(s), ok, "{s}");
        }
    }

    #[test]
    fn a_listed_key_of_an_unexpected_shape_is_dropped() {
        let mut v: Value =
            serde_json::from_str(r#"{"env":"TOKEN=x","permissions":["a"]}"#).expect("json");
        let mut dropped = Vec::new();
        filter(&mut v, &CLAUDE_SETTINGS, "", &mut dropped);
        assert_eq!(dropped, ["env", "permissions"]);
        assert!(!v.to_string().contains("TOKEN=x"));
    }

    #[test]
    fn credentials_in_urls_are_left_out_and_named() {
        let (u, r) = clean_url(
            "https://me:s3cr3t@mcp.example.com:8443/v1/sse?team=a&access_token=T0K&x=1#tok",
        );
        assert_eq!(u, "https://mcp.example.com:8443/v1/sse?team=a&x=1");
        assert_eq!(r, ["userinfo", "query.access_token", "fragment"]);
        let (u, r) = clean_url("http://127.0.0.1:4000");
        assert_eq!((u.as_str(), r.len()), ("http://127.0.0.1:4000", 0));
        let mut v = serde_json::json!({"url": "https://u:p@h/x?api_key=K", "other": 1});
        let mut dropped = Vec::new();
        filter(
            &mut v,
            &Rule::Fields(&[("url", Rule::Url)]),
            "m",
            &mut dropped,
        );
        assert_eq!(v, serde_json::json!({"url": "https://h/x"}));
        assert_eq!(
            dropped,
            ["m.other", "m.url (userinfo)", "m.url (query.api_key)"]
        );
        let mut v = serde_json::json!({"url": {"not": "text"}});
        let mut dropped = Vec::new();
        filter(
            &mut v,
            &Rule::Fields(&[("url", Rule::Url)]),
            "",
            &mut dropped,
        );
        assert_eq!(dropped, ["url"]);
    }
}
