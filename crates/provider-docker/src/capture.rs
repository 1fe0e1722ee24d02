//! A box's nodes: whether its container changed since the last one, and making one.
//!
//! # How "changed since the last node" is told
//!
//! The engine lists what differs between a container and its image ([`Engine::changes`]).
//! A box's container is made from a node's image (at create and at every checkout) and
//! then keeps running on it while later nodes are committed, so that list is cumulative:
//! it is compared with the list as it was when the last node was made, kept in the box's
//! directory ([`STATE`]). The list counts what auto-capture counts locally — no ignored
//! path (the box's ignore set, over paths relative to `/`), no directory listed because
//! something below it changed (what changed below it is listed itself), and not the mount
//! point of the engine's init ([`ENGINE_MADE`]).
//!
//! * The lists differ: something changed.
//! * They are equal and empty: nothing changed.
//! * They are equal and not empty: a listed file may have been written again, which the
//!   engine lists the same. Just before a node is committed, the box writes a marker file
//!   ([`MARKER`], in `/tmp`, which is ignored); the box's own `stat` then gives the change
//!   times (ctime, in nanoseconds: `%z`, which GNU's and busybox's `stat` both print) of the
//!   marker and of the listed paths, and a path changed after the marker is a change. The
//!   change time, not the modification time: the kernel sets it on every write, and no
//!   program can set it back (`touch -d` sets the modification time only), so a file
//!   written again and given an old time is still seen. When `stat` cannot answer (an
//!   image without it, a marker removed, a path gone meanwhile), the box counts as
//!   changed: a node too many, never a change lost.
//!
//! The marker is written before the node's commit (a file written between the two counts
//! once more: a node too many, never a change lost), the list after it (a crash in between
//! leaves the old list, which makes the next look see a change: a node too many).

use std::collections::HashSet;
use std::path::Path;

use agentbox_boxes::records::record::{self, BoxDirs, BoxRecord};
use agentbox_boxes::Result;
use agentbox_docker::changes::{Change, ChangeKind};
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;
use agentbox_store::{CommitOpts, Held, Store};
use serde::{Deserialize, Serialize};

use crate::errors::remote;
use crate::names;
use crate::provider::{DockerProvider, KIND};

/// The marker a node's commit writes in the box first (see the module's documentation).
pub const MARKER: &str = "/tmp/.agentbox-node";

/// The file in a box's directory holding [`State`].
pub const STATE: &str = "docker-capture.json";

/// Paths the engine itself makes in every container (the mount point of its init): never
/// the box's change.
const ENGINE_MADE: &[&str] = &["/sbin/docker-init"];

/// How many paths one `stat` is given.
const STAT_BATCH: usize = 512;

/// What the last node saw, as JSON in [`STATE`]: the container it was made in (its id: a
/// recreated container starts with no change) and the counted changes then.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct State {
    container: String,
    /// `(path, kind)`, `kind` one of `M`, `A`, `D`.
    changes: Vec<(String, char)>,
    /// Whether the marker was written before that node.
    marker: bool,
}

fn letter(k: ChangeKind) -> char {
    match k {
        ChangeKind::Modified => 'M',
        ChangeKind::Added => 'A',
        ChangeKind::Deleted => 'D',
    }
}

/// The changes of box `rec`'s container that count (see the module's documentation).
pub(crate) fn counted(engine: &Engine, rec: &BoxRecord) -> Result<Vec<Change>> {
    let all = engine
        .changes(&names::container(rec.name.as_str()))
        .map_err(remote)?;
    Ok(count(&all, &record::ignore_set(rec)))
}

/// Those of `all` that count, given the box's ignore set.
fn count(all: &[Change], ignore: &agentbox_boxes::records::ignore::IgnoreSet) -> Vec<Change> {
    let above: HashSet<&Path> = all
        .iter()
        .flat_map(|c| Path::new(&c.path).ancestors().skip(1))
        .collect();
    all.iter()
        .filter(|c| !(c.kind != ChangeKind::Deleted && above.contains(Path::new(&c.path))))
        .filter(|c| !ENGINE_MADE.contains(&c.path.as_str()))
        // The in-box agentbox and its relay's socket are the provider's, not the box's.
        .filter(|c| !crate::relay::inbox_bin::is_own_path(&c.path))
        .filter(|c| {
            let rel = c.path.trim_start_matches('/');
            !rel.is_empty() && !ignore.is_ignored(Path::new(rel))
        })
        .cloned()
        .collect()
}

fn state_path(p: &DockerProvider, name: &str) -> std::path::PathBuf {
    BoxDirs::new(&p.home, name).dir.join(STATE)
}

fn read_state(p: &DockerProvider, name: &str) -> Result<Option<State>> {
    Ok(agentbox_core::atomic::read_json_opt::<State>(&state_path(
        p, name,
    ))?)
}

/// Forget what the last node saw: box `name`'s container was recreated.
pub(crate) fn reset(p: &DockerProvider, name: &str) -> Result<()> {
    match fs_err::remove_file(state_path(p, name)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Whether box `rec` changed since its last node; the counted changes now, and the
/// container's id.
fn changed(p: &DockerProvider, engine: &Engine, rec: &BoxRecord) -> Result<(bool, Vec<Change>)> {
    let name = rec.name.as_str();
    let now = counted(engine, rec)?;
    let id = container_id(engine, name)?;
    let last = read_state(p, name)?.filter(|s| s.container == id);
    let then: Vec<(String, char)> = last.as_ref().map(|s| s.changes.clone()).unwrap_or_default();
    let listed: Vec<(String, char)> = now
        .iter()
        .map(|c| (c.path.clone(), letter(c.kind)))
        .collect();
    if listed != then {
        return Ok((true, now));
    }
    if now.is_empty() {
        return Ok((false, now));
    }
    if !last.is_some_and(|s| s.marker) {
        return Ok((true, now));
    }
    let present: Vec<&str> = now
        .iter()
        .filter(|c| c.kind != ChangeKind::Deleted)
        .map(|c| c.path.as_str())
        .collect();
    Ok((written_again(engine, name, &present)?, now))
}

/// Whether any of `paths` changed after the marker (`true` when the box cannot say).
fn written_again(engine: &Engine, name: &str, paths: &[&str]) -> Result<bool> {
    Ok(after_marker(engine, name, paths)?.is_none_or(|each| each.contains(&true)))
}

/// For each of `paths`, whether it changed after the marker, as the box's `stat` says
/// (`None`: it cannot say).
fn after_marker(engine: &Engine, name: &str, paths: &[&str]) -> Result<Option<Vec<bool>>> {
    let container = names::container(name);
    if paths.is_empty() {
        return Ok(Some(Vec::new()));
    }
    // A stopped box runs no `stat` (`status` of a stopped box asks): it cannot say.
    if !engine
        .container(&container)
        .map_err(remote)?
        .is_some_and(|c| c.running)
    {
        return Ok(None);
    }
    let mut each = Vec::with_capacity(paths.len());
    for batch in paths.chunks(STAT_BATCH) {
        let mut argv = ["stat", "-c", "%z", "--", MARKER]
            .map(str::to_owned)
            .to_vec();
        argv.extend(batch.iter().map(|p| (*p).to_owned()));
        let spec = ExecSpec {
            argv,
            ..Default::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = engine
            .exec(&container, &spec, None, &mut out, &mut err)
            .map_err(remote)?;
        if status != 0 {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&out);
        let times: Vec<Option<&str>> = text.lines().map(instant).collect();
        let Some((Some(marker), listed)) = times.split_first() else {
            return Ok(None);
        };
        if listed.len() != batch.len() {
            return Ok(None);
        }
        for t in listed {
            match t {
                Some(t) => each.push(t > marker),
                None => return Ok(None),
            }
        }
    }
    Ok(Some(each))
}

/// The paths of box `name` (relative to `/`) that changed since its last node, each with
/// how: what the engine lists now and did not then, what it listed then and does not
/// now, and what it lists both times but was written after the node's marker (every such
/// path when the box cannot tell).
pub(crate) fn since_head(
    p: &DockerProvider,
    name: &str,
) -> Result<Vec<(String, agentbox_store::fsops::ChangeKind)>> {
    use agentbox_store::fsops::ChangeKind as K;
    let (rec, engine) = p.boxed(name)?;
    let now = counted(&engine, &rec)?;
    let id = container_id(&engine, name)?;
    let last = read_state(p, name)?.filter(|s| s.container == id);
    let marker = last.as_ref().is_some_and(|s| s.marker);
    let then: std::collections::BTreeMap<String, char> = last
        .map(|s| s.changes.into_iter().collect())
        .unwrap_or_default();
    let rel = |path: &str| path.trim_start_matches('/').to_owned();
    let mut out = Vec::new();
    let mut both = Vec::new();
    for c in &now {
        match then.get(&c.path) {
            Some(k) if *k == letter(c.kind) => {
                if c.kind != ChangeKind::Deleted {
                    both.push(c.path.as_str());
                }
            }
            _ => out.push((
                rel(&c.path),
                match c.kind {
                    ChangeKind::Added => K::Added,
                    ChangeKind::Deleted => K::Removed,
                    ChangeKind::Modified => K::Modified,
                },
            )),
        }
    }
    let listed: HashSet<&str> = now.iter().map(|c| c.path.as_str()).collect();
    for (path, k) in &then {
        if !listed.contains(path.as_str()) {
            // Back to the image's: what the node had added is gone, what it had deleted
            // is back, what it had modified is the image's again.
            let kind = match k {
                'A' => K::Removed,
                'D' => K::Added,
                _ => K::Modified,
            };
            out.push((rel(path), kind));
        }
    }
    let written = if marker {
        after_marker(&engine, name, &both)?
    } else {
        None
    };
    for (i, path) in both.iter().enumerate() {
        if written.as_ref().is_none_or(|w| w.get(i) == Some(&true)) {
            out.push((rel(path), K::Modified));
        }
    }
    out.sort();
    Ok(out)
}

/// The date and time of a `stat` `%z` line (`2026-12-05 07:27:30.249026445 +0000`), which
/// compare as text (one `stat` prints every line in one zone); `None` when it is not one.
fn instant(line: &str) -> Option<&str> {
    let t = line.get(..29)?;
    let ok = t.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 => b == b' ',
        13 | 16 => b == b':',
        19 => b == b'.',
        _ => b.is_ascii_digit(),
    });
    ok.then_some(t)
}

fn container_id(engine: &Engine, name: &str) -> Result<String> {
    let c = names::container(name);
    engine
        .container(&c)
        .map_err(remote)?
        .map(|i| i.id)
        .ok_or_else(|| {
            remote(agentbox_docker::DockerError::ContainerMissing {
                engine: engine.endpoint().shown(),
                container: c,
            })
        })
}

/// After a command with capture: a node of box `rec` when it changed since the last one.
pub(crate) fn auto(
    p: &DockerProvider,
    engine: &Engine,
    rec: &BoxRecord,
    label: &str,
) -> Result<Option<String>> {
    let name = rec.name.as_str();
    let _lock = p.history_lock(name, "capture")?;
    let (changed, now) = changed(p, engine, rec)?;
    if !changed {
        return Ok(None);
    }
    let store = Store::open(&p.home.store_dir())?;
    let node = make_node(p, &store, engine, rec, label, Some(label), &now)?;
    // Automatic nodes accumulate: thin old ones, as the local provider does.
    let keep = rec
        .keep
        .unwrap_or(agentbox_boxes::config::keys::DEFAULT_KEEP);
    if node.seq > keep {
        if let Err(e) = store.retain(name, keep) {
            eprintln!("retention after an automatic node failed: {e}");
        }
    }
    Ok(Some(node.id.into_string()))
}

/// An explicit commit of box `name`: a node whether or not anything changed (as the local
/// provider makes one), running or not.
pub(crate) fn commit(
    p: &DockerProvider,
    name: &str,
    message: &str,
    command: Option<&str>,
) -> Result<String> {
    let (rec, engine) = p.boxed(name)?;
    crate::remake::restore_if_gone(p, &engine, &rec)?;
    let _lock = p.history_lock(name, "commit")?;
    let now = counted(&engine, &rec)?;
    let store = Store::open(&p.home.store_dir())?;
    let node = make_node(p, &store, &engine, &rec, message, command, &now)?;
    Ok(node.id.into_string())
}

/// Commit box `rec`'s container as a node (its changes now being `now`).
fn make_node(
    p: &DockerProvider,
    store: &Store,
    engine: &Engine,
    rec: &BoxRecord,
    message: &str,
    command: Option<&str>,
    now: &[Change],
) -> Result<agentbox_store::Node> {
    let name = rec.name.as_str();
    let container = names::container(name);
    let id = container_id(engine, name)?;
    let marker = write_marker(engine, &container).is_ok();
    let tag = names::node_tag(&p.home);
    let image = engine
        .commit(
            &container,
            names::NODE_REPO,
            &tag,
            message,
            &names::labels(&p.home, name),
        )
        .map_err(remote)?;
    let opts = CommitOpts {
        message: message.to_owned(),
        command: command.map(str::to_owned),
        metadata: Default::default(),
    };
    let held = Held {
        by: KIND.to_owned(),
        object: image,
    };
    let node = match store.commit_held(name, held, opts) {
        Ok(n) => n,
        Err(e) => {
            // No node names the image: it goes now.
            let _ = engine.remove_image(&format!("{}:{tag}", names::NODE_REPO));
            return Err(e.into());
        }
    };
    let state = State {
        container: id,
        changes: now
            .iter()
            .map(|c| (c.path.clone(), letter(c.kind)))
            .collect(),
        marker,
    };
    agentbox_core::atomic::write_json(&state_path(p, name), &state)?;
    Ok(node)
}

/// Write [`MARKER`] in the container: by a command when it runs, else sent as a file
/// (its time the host's).
fn write_marker(engine: &Engine, container: &str) -> Result<()> {
    let running = engine
        .container(container)
        .map_err(remote)?
        .is_some_and(|c| c.running);
    if running {
        let spec = ExecSpec {
            argv: [
                "sh",
                "-c",
                &format!("echo \"$1\" > {MARKER}"),
                "sh",
                &agentbox_core::id::new_id(),
            ]
            .map(str::to_owned)
            .to_vec(),
            ..Default::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = engine
            .exec(container, &spec, None, &mut out, &mut err)
            .map_err(remote)?;
        if status == 0 {
            return Ok(());
        }
        return Err(crate::errors::failed(format!(
            "writing {MARKER} in container {container}: {}",
            String::from_utf8_lossy(&err).trim()
        )));
    }
    let dir = tempfile::tempdir()?;
    let tar = dir.path().join("marker.tar");
    let mut b = tar::Builder::new(fs_err::File::create(&tar)?);
    let body = agentbox_core::id::new_id();
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(body.len() as u64);
    h.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    b.append_data(&mut h, MARKER.trim_start_matches('/'), body.as_bytes())?;
    b.into_inner()?;
    engine.upload_tar(container, "/", &tar).map_err(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_times_are_read_to_the_nanosecond_and_compare_in_order() {
        let a = instant("2026-12-05 07:27:30.249026445 +0000").expect("a time");
        let b = instant("2026-12-05 07:27:30.249026446 +0000").expect("a time");
        assert!(a < b);
        assert_eq!(a, "2026-12-05 07:27:30.249026445");
        // Without nanoseconds (a `stat` that cannot give them) it is no time to compare.
        assert_eq!(instant("2026-12-05 07:27:30 +0000"), None);
        assert_eq!(instant("stat: can't stat 'x'"), None);
        assert_eq!(instant(""), None);
    }

    #[test]
    fn counted_changes_leave_out_parents_ignored_paths_and_the_engines_own() {
        let ch = |path: &str, kind| Change {
            path: path.to_owned(),
            kind,
        };
        let all = vec![
            ch("/sbin", ChangeKind::Added),
            ch("/sbin/docker-init", ChangeKind::Added),
            ch("/tmp", ChangeKind::Modified),
            ch("/tmp/x", ChangeKind::Added),
            ch("/workspace", ChangeKind::Modified),
            ch("/workspace/a", ChangeKind::Modified),
            ch("/workspace/gone", ChangeKind::Deleted),
            ch("/workspace/new", ChangeKind::Added),
            ch("/workspace/new/f", ChangeKind::Added),
            ch("/workspace/empty", ChangeKind::Added),
        ];
        let ignore = agentbox_boxes::records::ignore::IgnoreSet::new(
            &agentbox_boxes::records::ignore::IgnoreSet::default_patterns(),
        );
        let kept = count(&all, &ignore);
        let kept: Vec<&str> = kept.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            kept,
            [
                "/workspace/a",
                "/workspace/gone",
                "/workspace/new/f",
                "/workspace/empty"
            ]
        );
    }
}
