//! The engines boxes of a home were made on, kept so that `prune` still finds a box's
//! images there after the box is gone (GC frees a destroyed box's nodes later, and their
//! images are on the engine the box was on), and asks no engine when no Docker box was
//! ever made.
//!
//! On disk: `<home>/docker-engines.json`, a JSON array of the engines' URLs as they were
//! resolved (`unix:///var/run/docker.sock`, `ssh://me@big`: not the names that found
//! them, which a configuration may change), sorted, each once; changed under
//! `<home>/docker-engines.lock`.
//!
//! Beside it, `<home>/docker-queued.json`: the containers of destroyed boxes left on an
//! engine that did not answer then ([`Queued`]), until `prune` finds them gone.

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
    let _lock = locked(home, "note an engine")?;
    let mut all = engines(home)?;
    if all.insert(engine.to_owned()) {
        agentbox_core::atomic::write_json(&path(home), &all)?;
    }
    Ok(())
}

/// A destroyed box's container left on an engine that did not answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Queued {
    /// The engine's URL, as [`engines`] keeps it.
    pub engine: String,
    pub container: String,
    /// When its box was destroyed.
    pub since: chrono::DateTime<chrono::Utc>,
}

fn queue_path(home: &Home) -> PathBuf {
    home.root().join("docker-queued.json")
}

fn locked(home: &Home, doing: &str) -> Result<FileLock> {
    fs_err::create_dir_all(home.root())?;
    Ok(FileLock::acquire(
        &home.root().join("docker-engines.lock"),
        Mode::Exclusive,
        "the Docker engines ledger",
        doing,
    )?)
}

/// The containers queued for `prune`.
pub fn queued(home: &Home) -> Result<Vec<Queued>> {
    Ok(agentbox_core::atomic::read_json_opt(&queue_path(home))?.unwrap_or_default())
}

/// Queue container `container` on the engine at URL `engine` for `prune`. The engine is
/// not noted among [`engines`] for it: one that never answers again must not hold back
/// what `prune` removes elsewhere.
pub fn queue(home: &Home, engine: &str, container: &str) -> Result<()> {
    let _lock = locked(home, "queue a container")?;
    let mut all = queued(home)?;
    if !all
        .iter()
        .any(|q| q.engine == engine && q.container == container)
    {
        all.push(Queued {
            engine: engine.to_owned(),
            container: container.to_owned(),
            since: chrono::Utc::now(),
        });
        agentbox_core::atomic::write_json(&queue_path(home), &all)?;
    }
    Ok(())
}

/// Take `q` off the queue.
pub fn unqueue(home: &Home, q: &Queued) -> Result<()> {
    let _lock = locked(home, "unqueue a container")?;
    let mut all = queued(home)?;
    let before = all.len();
    all.retain(|o| !(o.engine == q.engine && o.container == q.container));
    if all.len() != before {
        agentbox_core::atomic::write_json(&queue_path(home), &all)?;
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

    #[test]
    fn a_container_is_queued_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = Home::at(dir.path().join("home"));
        queue(&home, "ssh://me@big", "agentbox-a").expect("queue");
        queue(&home, "ssh://me@big", "agentbox-a").expect("again");
        queue(&home, "ssh://me@big", "agentbox-b").expect("queue");
        let q = queued(&home).expect("read");
        assert_eq!(
            q.iter().map(|q| q.container.as_str()).collect::<Vec<_>>(),
            ["agentbox-a", "agentbox-b"]
        );
        assert!(engines(&home).expect("engines").is_empty());
        unqueue(&home, &q[0]).expect("unqueue");
        assert_eq!(queued(&home).expect("read"), q[1..]);
    }
}
