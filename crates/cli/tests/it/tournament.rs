//! What `tournament` prints for humans: the one node a `--keep` move makes, the losers'
//! output without their colour codes (every other control escaped), and its usage line.

use crate::common::{git, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// The word after `marker` in `text` (up to a space or a closing parenthesis).
fn after<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in:\n{text}"));
    let rest = &text[at + marker.len()..];
    let end = rest.find([' ', ')']).unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn keep_names_one_node_and_losers_output_loses_only_its_colours() {
    if !require_root("keep_names_one_node_and_losers_output_loses_only_its_colours") {
        return;
    }
    let env = Env::new();
    let repo = env.path("repo");
    write(&repo.join("a.txt"), "one\n");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "t"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    env.ok(&["create", "src", "--from", repo.to_str().expect("utf-8")]);
    let out = env.run(&[
        "tournament",
        "src",
        "--keep",
        "--test",
        "test -f won",
        "-c",
        "win=echo yes > won",
        "-c",
        r"lose=printf '\033[2mdim\033[0m \033]0;title\007 \033[2Kx\n'; false",
    ]);
    kill_supervisors(&env.path("home"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", stderr(&out));
    // The colours are gone; the title-setting OSC and the line erase are shown escaped.
    assert!(
        text.contains("  | dim \\u{1b}]0;title\\u{7} \\u{1b}[2Kx\n"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");
    // The move names one node, the one the source box is at now.
    let noted = after(&text, "now holds the winner's work (node ");
    let moved = after(&text, "moved to it (HEAD ");
    assert_eq!(noted, moved, "{text}");
    let list = env.json(&["list", "--all"]);
    let head = list
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["name"] == "src")
        .and_then(|e| e["head"].as_str())
        .expect("src's HEAD")
        .to_owned();
    assert!(head.starts_with(moved), "HEAD {head}, printed {moved}");
}

#[test]
fn its_usage_line_shows_optional_arguments_as_optional() {
    let env = Env::new();
    // AGENTBOX_HOME is set (clap counts --home as given) and BOX is given.
    let out = env.run(&["tournament", "src", "--test", "true"]);
    let err = stderr(&out);
    let usage = err
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("no usage line in:\n{err}"));
    assert_eq!(
        usage,
        "Usage: agentbox tournament [OPTIONS] --test <CMD> -c <NAME=CMD>... [BOX]"
    );
}
