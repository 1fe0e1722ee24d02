//! The engines boxes of a home were made on, kept so that `prune` still finds a box's
//! images there after the box is gone (GC frees a destroyed box's nodes later, and their
//! images are on the engine the box was on), and asks no engine when no Docker box was
//! ever made.
//!
//! On disk: `<home>/docker-engines.json`, a JSON array of the engines' URLs as they were
//! resolved (`unix:///var/run/docker.sock`, `ssh://me@big`: not the names that found
//! them, which a configuration may change), sorted, each once; changed under
//! `<home>/docker-engines.lock`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use agentbox_boxes::Result;
use agentbox_core::home::Home;
use agentbox_core::lock::{FileLock, Mode};

fn path(home: &Home) -> PathBuf {
    home.root().join("docker-engines.json")
}

/// The engines noted for `home`.
pub fn engines(home: &Home) -> Result<BTreeSet<String>> {
    Ok(agentbox_core::atomic::read_json_opt(&path(home))?.unwrap_or_default())
}

/// Note that a box of `home` is made on the engine at URL `engine`.
pub fn note(home: &Home, engine: &str) -> Result<()> {
    fs_err::create_dir_all(home.root())?;
    let _lock = FileLock::acquire(
        &home.root().join("docker-engines.lock"),
        Mode::Exclusive,
        "the Docker engines ledger",
        "note an engine",
    )?;
    let mut all = engines(home)?;
    if all.insert(engine.to_owned()) {
        agentbox_core::atomic::write_json(&path(home), &all)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_noted_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = Home::at(dir.path().join("home"));
        assert!(engines(&home).expect("none yet").is_empty());
        note(&home, "ssh://me@big").expect("note");
        note(&home, "unix:///var/run/docker.sock").expect("note");
        note(&home, "ssh://me@big").expect("note again");
        assert_eq!(
            engines(&home).expect("read"),
            BTreeSet::from([
                "ssh://me@big".to_owned(),
                "unix:///var/run/docker.sock".to_owned()
            ])
        );
        let text = fs_err::read_to_string(path(&home)).expect("file");
        let json: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            json,
            serde_json::json!(["ssh://me@big", "unix:///var/run/docker.sock"])
        );
    }
}
