//! A Docker box's checkpoint: an image `agentbox-ckpt-<project key>:<name>` made from one
//! of the box's nodes, in a container of its own (the capture) so that the box itself is
//! not touched:
//!
//! 1. the capture is made from the node's image (no network, none of the box's `--env`)
//!    and started;
//! 2. the cleanup command (`checkpoint.cleanupCommand`), if any, runs in it as root; its
//!    failure is recorded, never fatal (a cleanup is best-effort);
//! 3. the cleanup's patterns are matched on the host against the capture's listing (data,
//!    see [`crate::container_fs`]), and what matches is removed or emptied in the capture;
//! 4. layered: the capture is committed (one layer over the node's image); flattened: it
//!    is exported and imported as a single-layer image (`FROM scratch`), given back the
//!    configuration an export drops (environment, command, entry point, working directory,
//!    user, exposed ports: the node image's);
//! 5. the capture is removed, whatever happened (a crash leaves it labelled as a box of
//!    its own name, which no box has: `prune` removes it).
//!
//! The image carries [`names::HOME_LABEL`] and [`names::CHECKPOINT_LABEL`], no box: it is
//! its project's and outlives the box it came from. The store keeps it as a detached node
//! of the box's history named by the checkpoint's ref (see
//! `agentbox_boxes::checkpoints`); GC releases it with that node, and `prune` removes it
//! then.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use agentbox_boxes::provider::{CheckpointAsk, CheckpointTree};
use agentbox_boxes::{BoxError, Result};
use agentbox_core::glob::PathPattern;
use agentbox_docker::Engine;
use agentbox_sandbox::proto::Network;
use agentbox_store::{Held, Store};

use crate::container_fs::{self, Kind, Listing};
use crate::errors::{failed, remote};
use crate::names;
use crate::provider::{DockerProvider, KIND};
use crate::spec::{self, BoxSettings};

/// The most of the cleanup command's output a failure records.
const SAID: usize = 400;

/// Make checkpoint `ask` of box `name` (see the module's documentation).
pub fn capture(p: &DockerProvider, name: &str, ask: &CheckpointAsk<'_>) -> Result<CheckpointTree> {
    check_tag(ask.name)?;
    let (rec, engine) = p.boxed(name)?;
    let store = Store::open(&p.home.store_dir())?;
    let node = store.node(ask.node)?;
    let held = store
        .held_of(&node)?
        .filter(|h| h.by == KIND)
        .ok_or_else(|| {
            failed(format!(
                "box {name:?}: node {} has no image of the docker provider",
                node.id.as_str()
            ))
        })?;
    let work = format!("agentbox-capture-{}", agentbox_core::id::new_id());
    let settings = BoxSettings {
        env: &[],
        limits: &rec.limits,
        network: Network::None,
    };
    let mut c = spec::container(&p.home, name, &held.object, &settings);
    c.name = work.clone();
    // Labelled as a box of its own name (none has it), so that `prune` removes a capture
    // a crash left. Not as a look at a node: the image inherits the capture's labels, and
    // so would every container made from it.
    c.labels.insert(names::BOX_LABEL.to_owned(), work.clone());
    engine.create_container(&c).map_err(remote)?;
    let made = (|| {
        engine.start_container(&work).map_err(remote)?;
        let command_failed = match ask.command {
            Some(cmd) => run_command(&engine, &work, cmd)?,
            None => None,
        };
        let (deleted, truncated) = clean(&engine, &work, ask.cleanup)?;
        let repo = names::checkpoint_repo(ask.project_key);
        let labels = [
            (names::HOME_LABEL.to_owned(), names::home_key(&p.home)),
            (names::CHECKPOINT_LABEL.to_owned(), ask.name.to_owned()),
        ]
        .into();
        let message = format!("checkpoint {} of box {name}", ask.name);
        let scrub = scrubbed_env(&engine, &rec)?;
        let id = if ask.flatten {
            flatten(
                p,
                &engine,
                &work,
                &held.object,
                &repo,
                ask.name,
                &labels,
                &scrub,
            )?
        } else {
            engine
                .commit_with_env(&work, &repo, ask.name, &message, &labels, &scrub)
                .map_err(remote)?
        };
        Ok::<_, BoxError>(CheckpointTree {
            held: Held {
                by: KIND.to_owned(),
                object: id,
            },
            image: format!("{repo}:{}", ask.name),
            deleted,
            truncated,
            command_failed,
        })
    })();
    let _ = engine.remove_container(&work);
    made
}

/// The box's own variables (`--env`, `box.env`: their values may be secrets) as a
/// checkpoint's image has them: the box's image's value of each, else empty. A node's
/// image holds the box's container's environment; a checkpoint is its project's, for
/// other boxes.
fn scrubbed_env(
    engine: &Engine,
    rec: &agentbox_boxes::records::record::BoxRecord,
) -> Result<Vec<String>> {
    if rec.env.is_empty() {
        return Ok(Vec::new());
    }
    let base = match &rec.image {
        Some(image) if engine.image(image).map_err(remote)?.is_some() => {
            engine.run_config(image).map_err(remote)?.env
        }
        _ => Vec::new(),
    };
    Ok(rec
        .env
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .map(|k| {
            base.iter()
                .find(|b| b.split_once('=').is_some_and(|(bk, _)| bk == k))
                .cloned()
                .unwrap_or_else(|| format!("{k}="))
        })
        .collect())
}

/// A checkpoint name must be a Docker tag (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`).
pub(crate) fn check_tag(name: &str) -> Result<()> {
    let ok = name.len() <= 128
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        return Ok(());
    }
    Err(BoxError::BadSetting {
        key: "--name".into(),
        given: name.to_owned(),
        reason: "a Docker box's checkpoint is an image tag: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'".into(),
    })
}

/// Run the cleanup command in the capture; how it failed, when it did.
fn run_command(engine: &Engine, work: &str, cmd: &str) -> Result<Option<String>> {
    let ran = container_fs::run(
        engine,
        work,
        vec!["sh".into(), "-c".into(), cmd.to_owned()],
        "the cleanup command",
    )?;
    if ran.status == 0 {
        return Ok(None);
    }
    let said = format!("{}{}", String::from_utf8_lossy(&ran.out), ran.err);
    Ok(Some(format!(
        "exited with status {}: {}",
        ran.status,
        said.trim().chars().take(SAID).collect::<String>()
    )))
}

/// Remove and empty in the capture what `cleanup` names; how many of each.
fn clean(
    engine: &Engine,
    work: &str,
    cleanup: &agentbox_store::derive::Cleanup,
) -> Result<(usize, usize)> {
    let listing = container_fs::listing(engine, work, "/")?;
    let (delete, truncate) = plan(&listing, cleanup)?;
    let abs = |p: &PathBuf| -> Vec<u8> {
        let mut v = b"/".to_vec();
        v.extend_from_slice(p.as_os_str().as_bytes());
        v
    };
    let delete_args: Vec<Vec<u8>> = delete.iter().map(abs).collect();
    let truncate_args: Vec<Vec<u8>> = truncate.iter().map(abs).collect();
    // A path that cannot be removed (a mount point of the engine's) is left as it is:
    // `rm -f` goes on past it, and the commit does not take mounts anyway.
    let _ = container_fs::xargs(
        engine,
        work,
        &["rm", "-rf", "--"],
        64,
        &delete_args.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        "removing the checkpoint's cleaned paths",
    );
    container_fs::xargs(
        engine,
        work,
        &["sh", "-c", "for f; do : > \"$f\" || exit 1; done", "sh"],
        64,
        &truncate_args.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        "emptying the checkpoint's cleaned files",
    )?;
    Ok((delete.len(), truncate.len()))
}

/// What `cleanup` removes (outermost entries only) and empties (regular files not
/// removed) of `listing` (paths from the root).
fn plan(
    listing: &Listing,
    cleanup: &agentbox_store::derive::Cleanup,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let compile = |patterns: &[String]| -> Result<Vec<PathPattern>> {
        patterns
            .iter()
            .map(|p| {
                PathPattern::new(p).ok_or_else(|| BoxError::BadSetting {
                    key: "checkpoint.cleanup".into(),
                    given: p.clone(),
                    reason: "it names no path below the root".into(),
                })
            })
            .collect()
    };
    let delete = compile(&cleanup.delete)?;
    let truncate = compile(&cleanup.truncate)?;
    let parts = |p: &Path| -> Vec<Vec<u8>> {
        p.components()
            .map(|c| c.as_os_str().as_bytes().to_vec())
            .collect()
    };
    let matches = |patterns: &[PathPattern], p: &Path| {
        let owned = parts(p);
        let comps: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        patterns.iter().any(|pat| pat.matches(&comps))
    };
    let mut removed: BTreeSet<PathBuf> = BTreeSet::new();
    let mut emptied = Vec::new();
    // In order: a directory comes before what is below it.
    for (path, kind) in listing {
        if path.ancestors().skip(1).any(|a| removed.contains(a)) {
            continue;
        }
        if matches(&delete, path) {
            removed.insert(path.clone());
        } else if *kind == Kind::File && matches(&truncate, path) {
            emptied.push(path.clone());
        }
    }
    Ok((removed.into_iter().collect(), emptied))
}

/// The capture `work` as one layer: exported, imported with the node image's
/// configuration (`scrub` over its environment) and `labels`, as `repo:tag`; the image's
/// id.
#[allow(clippy::too_many_arguments)]
fn flatten(
    p: &DockerProvider,
    engine: &Engine,
    work: &str,
    node_image: &str,
    repo: &str,
    tag: &str,
    labels: &std::collections::HashMap<String, String>,
    scrub: &[String],
) -> Result<String> {
    let mut config = engine.run_config(node_image).map_err(remote)?;
    let key = |kv: &str| kv.split_once('=').map(|(k, _)| k.to_owned());
    for kv in &mut config.env {
        if let Some(s) = scrub.iter().find(|s| key(s) == key(kv)) {
            kv.clone_from(s);
        }
    }
    let mut changes = config.changes().map_err(|why| {
        failed(format!(
            "the configuration of image {node_image} cannot be given to a flattened image: {why}"
        ))
    })?;
    let mut label = String::from("LABEL");
    for (k, v) in labels {
        label.push_str(&format!(" {k}={}", serde_json::Value::from(v.as_str())));
    }
    changes.push(label);
    // The export may be as large as the box: beside the home, not in a small /tmp.
    let dir = tempfile::Builder::new()
        .prefix(".docker-flatten-")
        .tempdir_in(p.home.root())?;
    let tar = dir.path().join("rootfs.tar");
    engine.export_container(work, &tar).map_err(remote)?;
    engine
        .import_rootfs(&tar, repo, tag, &changes)
        .map_err(remote)
}

/// Remove checkpoint image `held` (its tag, only while it names the image the checkpoint
/// made: a tag moved to another image since is that one's).
pub fn remove(
    p: &DockerProvider,
    project: Option<&Path>,
    held: &agentbox_boxes::provider::HeldCheckpoint,
) -> Result<()> {
    let engine = p.engine(held.engine.as_deref(), project)?;
    match engine.image(&held.image).map_err(remote)? {
        Some(info) if info.id == held.image_id => {
            engine.remove_image(&held.image).map_err(remote)?;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleanup_removes_outermost_matches_and_empties_files_it_keeps() {
        let listing: Listing = [
            ("tmp", Kind::Dir),
            ("tmp/a", Kind::Dir),
            ("tmp/a/b", Kind::File),
            ("root", Kind::Dir),
            ("root/.bash_history", Kind::File),
            ("root/.netrc", Kind::File),
            ("var/log/x.log", Kind::File),
            ("var/log/link.log", Kind::Other),
            ("workspace/.env", Kind::File),
            ("workspace/keep.txt", Kind::File),
        ]
        .into_iter()
        .map(|(p, k)| (PathBuf::from(p), k))
        .collect();
        let mut cleanup = agentbox_store::derive::Cleanup::checkpoint();
        cleanup.delete.push("**/.netrc".into());
        cleanup.delete.push("/workspace/**/.env".into());
        let (delete, truncate) = plan(&listing, &cleanup).expect("plan");
        let s =
            |v: &[PathBuf]| -> Vec<String> { v.iter().map(|p| p.display().to_string()).collect() };
        assert_eq!(s(&delete), ["root/.netrc", "tmp/a", "workspace/.env"]);
        assert_eq!(s(&truncate), ["root/.bash_history", "var/log/x.log"]);
        assert!(check_tag("golden-1.0_x").is_ok());
        for bad in ["", ".x", "-x", "a/b", "a:b", &"x".repeat(129)] {
            assert!(check_tag(bad).is_err(), "{bad}");
        }
    }
}
