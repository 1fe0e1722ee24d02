//! The real agents' CLIs (Claude Code, Codex, OpenCode) when the machine has them: each
//! answers through the broker, its key never in the box.

use crate::common::write;
use agentbox_testkit::tier::require_tool;

use super::*;

/// The acceptance test of brokered credentials: the real Claude Code CLI runs `claude -p`
/// in a box against a loopback stub of the Messages API; the stub sees the host's real key,
/// the answer it streams is printed, and the box holds no trace of the key.
#[test]
fn claude_answers_through_the_broker_and_the_key_never_enters_the_box() {
    let test = "claude_answers_through_the_broker_and_the_key_never_enters_the_box";
    let Some(s) = Setup::new(test) else {
        return;
    };
    if !require_tool(test, "claude") || !require_tool(test, "python3") {
        return;
    }
    let seen = s.env.path("seen.log");
    let (stub, port) = start_stub(&seen);
    let url = format!("http://127.0.0.1:{port}");
    s.env.ok(&[
        "config",
        "set",
        "--global",
        "broker.anthropicUpstream",
        &url,
    ]);
    let key = format!(
        "sk-ant-real-{}{}",
        agentbox_core::id::new_id(),
        agentbox_core::id::new_id()
    );
    let seen_text = s.answer_from_stub(
        stub,
        &seen,
        &["claude", "--", "-p", "say hi"],
        &[
            ("ANTHROPIC_API_KEY", key.as_str()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ],
    );
    assert!(
        seen_text.contains(&format!("key={key}")),
        "the stub saw: {seen_text}"
    );
    let name = s.only_box();
    let found = search_box_for(&s, &name, &key);
    assert_eq!(found, "0\n", "the key is in the box: {found}");
    // Claude wrote its state into the box's own copy: nothing of it is outside the box.
    let kinds = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "test -d /root/.claude && ! test -L /root/.claude && echo dir; test -f /root/.claude.json && echo file",
        ],
        &[],
    );
    assert_eq!(kinds, "dir\nfile\n");
    assert!(!s.env.path("home/agent-home").exists());
}

#[test]
fn codex_answers_through_the_broker_with_its_configuration_sanitised() {
    let test = "codex_answers_through_the_broker_with_its_configuration_sanitised";
    let Some(s) = Setup::new(test) else {
        return;
    };
    if !require_tool(test, "codex") || !require_tool(test, "python3") {
        return;
    }
    // The host's Codex configuration, with what never belongs in a box.
    let user = s.user.to_string_lossy().into_owned();
    write(
        &s.user.join(".codex/config.toml"),
        &format!(
            "model = \"gpt-stub\"\nnotify = [\"{user}/bin/notify\"]\n\n[mcp_servers.hostonly]\ncommand = \"{user}/bin/mcp\"\n\n[mcp_servers.portable]\ncommand = \"npx\"\nargs = [\"some-mcp\"]\n"
        ),
    );
    write(
        &s.user.join(".codex/auth.json"),
        r#"{"OPENAI_API_KEY":"sk-file-never"}"#,
    );
    write(
        &s.user.join(".codex/sessions/2026/rollout.jsonl"),
        "host transcript\n",
    );
    write(&s.user.join(".codex/state_5.sqlite"), "host threads\n");
    write(&s.user.join(".codex/AGENTS.md"), "house rules\n");
    write(&s.user.join(".agents/skills/review/SKILL.md"), "a skill\n");
    let seen = s.env.path("seen.log");
    let (stub, port) = start_stub(&seen);
    s.env.ok(&[
        "config",
        "set",
        "--global",
        "broker.openaiUpstream",
        &format!("http://127.0.0.1:{port}"),
    ]);
    let key = format!("sk-proj-real-{}", agentbox_core::id::new_id());
    let seen_text = s.answer_from_stub(
        stub,
        &seen,
        &["codex", "--", "exec", "--skip-git-repo-check", "say hi"],
        &[("OPENAI_API_KEY", key.as_str())],
    );
    assert!(
        seen_text.contains(&format!("auth=Bearer {key}")),
        "the stub saw: {seen_text}"
    );
    let name = s.only_box();
    assert_eq!(search_box_for(&s, &name, &key), "0\n");
    let inside = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            // Codex's own sessions and databases of this run are the box's; the host's never
            // come in.
            "cd /root/.codex && ls -A | sort | tr '\\n' ' '; grep -rl -e 'host transcript' -e 'host threads' . | tr '\\n' ' '; echo; cat config.toml; cat /root/.agents/skills/review/SKILL.md",
        ],
        &[],
    );
    let (listing, rest) = inside.split_once('\n').expect("lines");
    assert!(!listing.split(' ').any(|f| f == "auth.json"), "{listing}");
    assert!(
        !listing.contains("./"),
        "the host's history is in the box: {listing}"
    );
    assert!(listing.contains("AGENTS.md"), "{listing}");
    assert!(
        !rest.contains("bin/notify") && !rest.contains("hostonly"),
        "{rest}"
    );
    assert!(rest.contains("portable"), "{rest}");
    assert!(rest.contains("/workspace"), "/workspace is trusted: {rest}");
    assert!(rest.contains("a skill"), "{rest}");
    assert!(!read(&s.user.join(".codex/config.toml")).contains("/workspace"));
}

#[test]
fn opencode_answers_with_its_configuration_and_without_its_credentials() {
    let test = "opencode_answers_with_its_configuration_and_without_its_credentials";
    let Some(s) = Setup::new(test) else {
        return;
    };
    if !require_tool(test, "opencode") || !require_tool(test, "python3") {
        return;
    }
    let seen = s.env.path("seen.log");
    let (stub, port) = start_stub(&seen);
    // The host's OpenCode: a provider of its own configuration (the stub), its last model
    // (state), and what never enters a box (its credentials, its sessions' storage).
    write(
        &s.user.join(".config/opencode/opencode.json"),
        &format!(
            r#"{{"provider":{{"stub":{{"npm":"@ai-sdk/openai-compatible","name":"Stub","options":{{"baseURL":"http://127.0.0.1:{port}/v1","apiKey":"{{env:OPENAI_API_KEY}}"}},"models":{{"m":{{"name":"m"}}}}}}}},"model":"stub/m"}}"#
        ),
    );
    write(
        &s.user.join(".local/share/opencode/auth.json"),
        r#"{"anthropic":{"type":"api","key":"sk-file-never"}}"#,
    );
    write(
        &s.user.join(".local/share/opencode/storage/session/s.json"),
        "host session\n",
    );
    write(
        &s.user.join(".local/state/opencode/model.json"),
        r#"{"recent":[{"providerID":"stub","modelID":"m"}]}"#,
    );
    let key = format!("sk-oc-{}", agentbox_core::id::new_id());
    let seen_text = s.answer_from_stub(
        stub,
        &seen,
        &["opencode", "--", "run", "say hi"],
        &[("OPENAI_API_KEY", key.as_str())],
    );
    assert!(
        seen_text.contains(&format!("auth=Bearer {key}")),
        "{seen_text}"
    );
    let name = s.only_box();
    // The forwarded key reached the agent's process only: no other command of the box, and
    // no file, holds it.
    assert_eq!(search_box_for(&s, &name, &key), "0\n");
    let inside = s.ok(
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "test -e /root/.local/share/opencode/auth.json && echo credentials; grep -rl 'host session' /root/.local/share/opencode; cat /root/.local/state/opencode/model.json; echo",
        ],
        &[],
    );
    assert_eq!(
        inside,
        "{\"recent\":[{\"providerID\":\"stub\",\"modelID\":\"m\"}]}\n"
    );
}
