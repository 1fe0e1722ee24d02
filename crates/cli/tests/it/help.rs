//! Snapshots of every command's `--help`: a change to what a user reads is reviewed in the
//! diff of `tests/snapshots/`, not discovered.

use std::process::Command;

/// Every subcommand (and nested one) of the binary, from its own help.
fn commands() -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    let mut todo = vec![Vec::<String>::new()];
    while let Some(prefix) = todo.pop() {
        let text = help(&prefix);
        let Some(section) = text.split("Commands:\n").nth(1) else {
            continue;
        };
        for line in section.lines() {
            let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            else {
                break;
            };
            if name == "help" {
                continue;
            }
            let mut cmd = prefix.clone();
            cmd.push(name.to_owned());
            out.push(cmd.clone());
            todo.push(cmd);
        }
    }
    out.sort();
    out
}

fn help(cmd: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_agentbox"))
        .args(cmd)
        .arg("--help")
        // Variables clap shows the values of.
        .env_remove("AGENTBOX_HOME")
        .env_remove("AGENTBOX_IMPORT_MAX_SIZE")
        .env("COLUMNS", "100")
        .output()
        .expect("run agentbox --help");
    assert!(out.status.success(), "{cmd:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_help_text() {
    let cmds = commands();
    assert!(cmds.len() > 20, "found only {cmds:?}");
    for cmd in cmds {
        let name = if cmd.is_empty() {
            "agentbox".to_owned()
        } else {
            format!("agentbox-{}", cmd.join("-"))
        };
        insta::assert_snapshot!(name, help(&cmd));
    }
}
