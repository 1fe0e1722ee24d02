//! The agent catalogue: what each agent is — its command, how its permission prompts are
//! skipped, its configuration on the host, what of it never enters a box, the variables it
//! needs — as data. `claude`, `codex` and `opencode` are built in; more come from
//! `<home>/agents.yaml` (the same fields; an entry of a built-in name replaces it):
//!
//! ```yaml
//! pi:
//!   command: [pi]
//!   skip_permissions: [--yolo]
//!   config:
//!     - path: ~/.pi
//!       include: [settings.json, prompts]   # only these entries of ~/.pi (default: all)
//!       exclude: [prompts/**/node_modules]
//!   env: [PI_API_KEY]
//! ```
//!
//! A built-in agent's configuration enters a box by an allow-list ([`allow`]): the entries
//! and keys known to carry no credential; a user-defined one by its `include`/`exclude`.
//!
//! How an agent's configuration reaches a box is [`sync`]'s business; launching is
//! [`launch`]'s ([`crate::facade::Boxes::launch_agent`]), with the box's credential broker
//! as the domain sees it ([`broker`]).
//!
//! It owns what an agent is and what of the host's configuration and credentials reaches
//! a box for it. It builds on the lifecycle (a launch may create and start a box) and is
//! called by nothing below it; it never hands a credential to a box: a box sees only what
//! the allow-lists keep, and credentials stay with the broker on the host.

pub mod allow;
pub mod broker;
pub mod launch;
pub mod sanitize;
pub mod sync;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentbox_core::home::Home;
use serde::{Deserialize, Serialize};

use crate::{BoxError, Result};

/// One configuration path of an agent, relative to the host user's home (`~/.claude`) and
/// synced to the same place under the box's home (`/root/.claude`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigPath {
    /// `~/…`: a directory or a file.
    pub path: String,
    /// Patterns (relative to `path`, `**` for any depth) never copied into a box: caches,
    /// native binaries of the host.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The entries directly below a directory `path` that are copied (a file, or a whole
    /// directory): an allow-list, so a credential store or a transcript an agent adds later
    /// stays on the host. Everything else is left out and named at each sync. `None`
    /// (`agents.yaml` without `include`): every entry not excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
}

/// An agent agentbox can launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    #[serde(default)]
    pub name: String,
    /// The command line that starts it.
    pub command: Vec<String>,
    /// Arguments that turn its own permission prompts off (the box is the sandbox).
    #[serde(default)]
    pub skip_permissions: Vec<String>,
    /// Arguments that give the first prompt: `{}` is replaced by the prompt (empty: the
    /// prompt is the last argument).
    #[serde(default)]
    pub prompt: Vec<String>,
    #[serde(default)]
    pub config: Vec<ConfigPath>,
    /// Variables forwarded from the calling shell to the agent's process (only).
    #[serde(default)]
    pub env: Vec<String>,
    /// `agentbox <agent> login`: the agent's own command that makes a long-lived token (run
    /// on the host), and the variable the saved token is given to the agent as.
    #[serde(default)]
    pub login: Vec<String>,
    #[serde(default)]
    pub login_var: Option<String>,
    /// Variables always set for it (`KEY=VALUE`): what it needs to know it runs in a sandbox.
    #[serde(default)]
    pub set_env: Vec<String>,
    /// Whether it takes its API's base URL from the environment, so the box's credential
    /// broker can stand in for the API (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`).
    #[serde(default)]
    pub brokered: bool,
    /// Arguments given (after the command) when it reaches its API through the box's broker,
    /// with `{VAR}` replaced by the broker's variables (`{OPENAI_BASE_URL}`): for an agent
    /// that takes its base URL from its configuration rather than the environment.
    #[serde(default)]
    pub broker_args: Vec<String>,
    /// Accepted for `agents.yaml` files of earlier versions: every box now keeps its own
    /// copy of an agent's configuration (nothing writable is shared between boxes).
    #[serde(default)]
    pub isolate_config: bool,
    /// Whether it is built in (`false`: from `agents.yaml`).
    #[serde(default, skip_deserializing)]
    pub builtin: bool,
}

fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// The built-in agents, by name.
pub fn builtin() -> Vec<Agent> {
    vec![
        Agent {
            name: "claude".into(),
            command: owned(&["claude"]),
            skip_permissions: owned(&["--dangerously-skip-permissions"]),
            prompt: Vec::new(),
            config: vec![
                // Not `.credentials.json`, `backups` (copies of `~/.claude.json` with its
                // keys), transcripts (`projects`, `history.jsonl`, `todos`…), caches.
                ConfigPath {
                    path: "~/.claude".into(),
                    exclude: owned(&["**/node_modules"]),
                    include: Some(owned(&[
                        "settings.json",
                        "CLAUDE.md",
                        "agents",
                        "commands",
                        "skills",
                        "output-styles",
                        "plugins",
                        "hooks",
                    ])),
                },
                ConfigPath {
                    path: "~/.claude.json".into(),
                    exclude: Vec::new(),
                    include: None,
                },
            ],
            env: owned(&[
                "ANTHROPIC_API_KEY",
                "CLAUDE_CODE_OAUTH_TOKEN",
                "CLAUDE_EFFORT",
                "ANTHROPIC_MODEL",
                "ANTHROPIC_BASE_URL",
            ]),
            login: owned(&["claude", "setup-token"]),
            login_var: Some("CLAUDE_CODE_OAUTH_TOKEN".into()),
            // Claude Code refuses to skip its permission prompts as root unless told it
            // runs in a sandbox (box root is root); no self-update inside a box.
            set_env: owned(&["IS_SANDBOX=1", "DISABLE_AUTOUPDATER=1"]),
            brokered: true,
            broker_args: Vec::new(),
            isolate_config: false,
            builtin: true,
        },
        Agent {
            name: "codex".into(),
            command: owned(&["codex"]),
            skip_permissions: owned(&["--dangerously-bypass-approvals-and-sandbox"]),
            prompt: Vec::new(),
            config: vec![
                // Not `auth.json`, sessions, logs, history, state databases.
                ConfigPath {
                    path: "~/.codex".into(),
                    exclude: Vec::new(),
                    include: Some(owned(&[
                        "config.toml",
                        "AGENTS.md",
                        "instructions.md",
                        "prompts",
                        "rules",
                    ])),
                },
                ConfigPath {
                    path: "~/.agents".into(),
                    exclude: Vec::new(),
                    include: Some(owned(&["skills"])),
                },
            ],
            env: owned(&["OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"]),
            login: Vec::new(),
            login_var: Some("OPENAI_API_KEY".into()),
            set_env: Vec::new(),
            brokered: true,
            // Codex takes its base URL from its configuration only, and an API key from the
            // environment only for a provider that names its variable.
            broker_args: owned(&[
                "-c",
                "model_provider=\"agentbox\"",
                "-c",
                "model_providers.agentbox={name=\"OpenAI (agentbox broker)\", base_url=\"{OPENAI_BASE_URL}\", env_key=\"OPENAI_API_KEY\", wire_api=\"responses\"}",
            ]),
            isolate_config: false,
            builtin: true,
        },
        Agent {
            name: "opencode".into(),
            command: owned(&["opencode"]),
            skip_permissions: Vec::new(),
            prompt: owned(&["--prompt", "{}"]),
            config: vec![
                // `~/.local/share/opencode` holds its credentials (`auth.json`,
                // `mcp-auth.json`), sessions and binaries: none of it enters a box.
                ConfigPath {
                    path: "~/.config/opencode".into(),
                    exclude: owned(&["**/node_modules"]),
                    include: Some(owned(&[
                        "opencode.json",
                        "opencode.jsonc",
                        "config.json",
                        "AGENTS.md",
                        "agent",
                        "agents",
                        "command",
                        "commands",
                        "mode",
                        "modes",
                        "plugin",
                        "plugins",
                        "tool",
                        "tools",
                        "themes",
                    ])),
                },
                ConfigPath {
                    path: "~/.local/state/opencode".into(),
                    exclude: Vec::new(),
                    include: Some(owned(&["model.json", "kv.json"])),
                },
            ],
            env: owned(&[
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
                "OPENROUTER_API_KEY",
                "GEMINI_API_KEY",
            ]),
            login: Vec::new(),
            login_var: None,
            set_env: Vec::new(),
            brokered: false,
            broker_args: Vec::new(),
            isolate_config: false,
            builtin: true,
        },
    ]
}

/// The file of user-defined agents.
pub fn catalogue_file(home: &Home) -> PathBuf {
    home.root().join("agents.yaml")
}

/// Every agent: the built-in ones, then `agents.yaml`'s (which may replace a built-in one).
pub fn catalogue(home: &Home) -> Result<Vec<Agent>> {
    let mut by_name: BTreeMap<String, Agent> =
        builtin().into_iter().map(|a| (a.name.clone(), a)).collect();
    let path = catalogue_file(home);
    if let Some(text) = read_opt(&path)? {
        let user: BTreeMap<String, Agent> =
            serde_saphyr::from_str(&text).map_err(|e| BoxError::BadAgents {
                path: path.clone(),
                why: e.to_string(),
            })?;
        for (name, mut a) in user {
            agentbox_core::name::check("agent", &name, agentbox_core::name::Hex::ShorterThanId)
                .map_err(|e| BoxError::BadAgents {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
            if a.command.is_empty() {
                return Err(BoxError::BadAgents {
                    path: path.clone(),
                    why: format!("agent {name:?} has no command"),
                });
            }
            for c in &a.config {
                if !c.path.starts_with("~/") || c.path.split('/').any(|p| p == "..") {
                    return Err(BoxError::BadAgents {
                        path: path.clone(),
                        why: format!(
                            "agent {name:?}: config path {:?} must be below the home (~/…)",
                            c.path
                        ),
                    });
                }
            }
            a.name = name.clone();
            a.builtin = false;
            by_name.insert(name, a);
        }
    }
    Ok(by_name.into_values().collect())
}

/// Agent `name` of the catalogue.
pub fn get(home: &Home, name: &str) -> Result<Agent> {
    catalogue(home)?
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| BoxError::NoSuchAgent { name: name.into() })
}

fn read_opt(path: &Path) -> Result<Option<String>> {
    match fs_err::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Agent {
    /// The agent's command line: its command, the permission-skipping arguments (unless
    /// `ask`), the first prompt, then `args` exactly as given.
    pub fn argv(&self, ask: bool, prompt: Option<&str>, args: &[String]) -> Vec<String> {
        self.argv_brokered(&[], ask, prompt, args)
    }

    /// [`Agent::argv`] for an agent reaching its API through a broker whose variables are
    /// `broker` (`KEY`, `VALUE`): its [`Agent::broker_args`] come after the command.
    pub fn argv_brokered(
        &self,
        broker: &[(String, String)],
        ask: bool,
        prompt: Option<&str>,
        args: &[String],
    ) -> Vec<String> {
        let mut argv = self.command.clone();
        if !broker.is_empty() {
            argv.extend(self.broker_args.iter().map(|a| {
                broker
                    .iter()
                    .fold(a.clone(), |a, (k, v)| a.replace(&format!("{{{k}}}"), v))
            }));
        }
        if !ask {
            argv.extend(self.skip_permissions.iter().cloned());
        }
        if let Some(p) = prompt {
            if self.prompt.is_empty() {
                argv.push(p.to_owned());
            } else {
                argv.extend(self.prompt.iter().map(|a| a.replace("{}", p)));
            }
        }
        argv.extend(args.iter().cloned());
        argv
    }

    /// The forwarded variables (`KEY=VALUE` each): the calling shell's, then the token
    /// `login` saved in `home` when the shell does not set its variable.
    pub fn forwarded_env(&self, home: &Home) -> Vec<String> {
        let mut out: Vec<String> = self.set_env.clone();
        out.extend(
            self.env
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}"))),
        );
        if let Some(var) = self.login_var.as_ref().filter(|v| !self.env.contains(v)) {
            match std::env::var(var) {
                Ok(v) => out.push(format!("{var}={v}")),
                Err(_) => {
                    if let Ok(Some(token)) = saved_token(home, &self.name) {
                        out.push(format!("{var}={token}"));
                    }
                }
            }
        } else if let Some(var) = &self.login_var {
            if std::env::var_os(var).is_none() {
                if let Ok(Some(token)) = saved_token(home, &self.name) {
                    out.push(format!("{var}={token}"));
                }
            }
        }
        out
    }
}

/// Where `agentbox <agent> login` keeps the agent's token: a file of the agentbox home, mode
/// 0600, never visible in a box (the agentbox home is hidden from every box).
pub fn token_file(home: &Home, agent: &str) -> PathBuf {
    home.root()
        .join("credentials")
        .join(format!("{agent}.token"))
}

/// The token saved for `agent`, if any.
pub fn saved_token(home: &Home, agent: &str) -> Result<Option<String>> {
    Ok(read_opt(&token_file(home, agent))?
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty()))
}

/// Save `token` for `agent` (mode 0600 from its creation: never readable by others).
pub fn save_token(home: &Home, agent: &str, token: &str) -> Result<PathBuf> {
    use fs_err::os::unix::fs::OpenOptionsExt;
    use std::io::Write;
    let path = token_file(home, agent);
    let dir = path.parent().expect("the token file is in a directory");
    fs_err::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{agent}.token.{}", std::process::id()));
    let mut f = fs_err::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token.trim().as_bytes())?;
    f.sync_all()?;
    fs_err::rename(&tmp, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_puts_skips_prompt_and_arguments_in_order() {
        let a = builtin().remove(0);
        assert_eq!(
            a.argv(false, Some("fix it"), &["--model".into(), "x".into()]),
            owned(&[
                "claude",
                "--dangerously-skip-permissions",
                "fix it",
                "--model",
                "x"
            ])
        );
        assert_eq!(a.argv(true, None, &[]), owned(&["claude"]));
        let o = builtin().remove(2);
        assert_eq!(
            o.argv(false, Some("p"), &[]),
            owned(&["opencode", "--prompt", "p"])
        );
    }

    #[test]
    fn user_agents_come_from_agents_yaml_and_are_checked() {
        let t = tempfile::tempdir().expect("tmp");
        let home = Home::at(t.path().to_owned());
        std::fs::write(
            catalogue_file(&home),
            "pi:\n  command: [pi, --fast]\n  config:\n    - path: ~/.pi\n      exclude: [sessions]\n  env: [PI_KEY]\n",
        )
        .expect("write");
        let all = catalogue(&home).expect("catalogue");
        let pi = all.iter().find(|a| a.name == "pi").expect("pi");
        assert_eq!(pi.command, owned(&["pi", "--fast"]));
        assert!(!pi.builtin);
        assert!(all.iter().any(|a| a.name == "claude" && a.builtin));
        std::fs::write(
            catalogue_file(&home),
            "bad:\n  command: [x]\n  config:\n    - path: /etc\n",
        )
        .expect("write");
        assert!(matches!(catalogue(&home), Err(BoxError::BadAgents { .. })));
    }
}

/// What `agentbox <agent>` is asked for.
#[derive(Debug, Clone, Default)]
pub struct LaunchSpec {
    pub agent: String,
    /// The box (`None`: the current project's only box, else a new one).
    pub box_name: Option<String>,
    /// Always make a new box.
    pub new: bool,
    /// Keep the agent's own permission prompts.
    pub ask: bool,
    /// Accepted for compatibility (`--isolate-config`): every box keeps its own copy of the
    /// agent's configuration.
    pub isolate_config: bool,
    pub prompt: Option<String>,
    /// Arguments for the agent, exactly as given.
    pub args: Vec<String>,
    /// The directory the caller is in (the project, and the box's matching directory).
    pub cwd: PathBuf,
}

/// An agent ready to run in its box.
#[derive(Debug, Clone)]
pub struct Launch {
    pub record: crate::records::record::BoxRecord,
    /// Whether the box was made for this launch.
    pub created: bool,
    pub argv: Vec<String>,
    /// `KEY=VALUE`s for the agent's process only.
    pub env: Vec<String>,
    /// What the configuration sync copied (host mirror, then into the box's own copy) and
    /// left out ([`sync::Synced::dropped`], in `staged`).
    pub staged: sync::Synced,
    pub synced: sync::Synced,
}

/// The host user's home: whose configuration and tools the agents get (`HOME`).
pub fn host_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}
