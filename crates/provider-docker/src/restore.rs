//! A Docker box made from a checkpoint: a container on the checkpoint's image, the
//! project's repositories moved to the host's present — a fresh branch `agentbox/<box>` at
//! the host's commit, the host's uncommitted work carried over — while what the
//! checkpoint's git does not track (its warm state, its untracked files) stays, as the
//! local provider's boxes get it (see `agentbox_boxes::lifecycle::reseed`).
//!
//! The host seeds the fresh workspace exactly as for a new box ([`crate::seed`]) and sends
//! it into a stage of the new container, `/.agentbox-reseed-<id>/workspace`; the merge's
//! plan is computed on the host from listings the container gives as data
//! ([`crate::reseed_plan`]) and carried out in the container by commands whose paths come
//! on their standard input ([`crate::container_fs`]): the host never touches the box's
//! files. The result is the box's first own node; on any failure nothing of the box is
//! left (container, node image, branches and pins in host repositories).

use crate::create::Made;
use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use agentbox_boxes::progress::Progress;
use agentbox_boxes::provider::{FromCheckpoint, NewBox, NewTree, Provider};
use agentbox_boxes::{BoxError, Result};
use agentbox_docker::Engine;
use agentbox_store::Held;

use crate::container_fs::{self, Kind};
use crate::errors::{failed, remote};
use crate::names;
use crate::provider::{DockerProvider, KIND};
use crate::reseed_plan;
use crate::spec::{self, BoxSettings, WORKSPACE};

/// Compares two paths (`$1`, `$2`) and prints `same` when both are regular files with the
/// same bytes and executable bits, or both symbolic links to the same target; else
/// `differ`.
const SAME_FILE: &str = r#"
if [ -L "$1" ] && [ -L "$2" ]; then
  [ "$(readlink "$1")" = "$(readlink "$2")" ] && echo same || echo differ
elif [ -f "$1" ] && [ ! -L "$1" ] && [ -f "$2" ] && [ ! -L "$2" ] \
  && { { [ -x "$1" ] && [ -x "$2" ]; } || { [ ! -x "$1" ] && [ ! -x "$2" ]; }; } \
  && cmp -s "$1" "$2"; then
  echo same
else
  echo differ
fi
"#;

/// Make box `new.name` from checkpoint `m` (see the module's documentation).
pub fn create_tree(
    p: &DockerProvider,
    new: &NewBox<'_>,
    m: &FromCheckpoint<'_>,
    progress: &dyn Progress,
) -> Result<NewTree> {
    let name = new.name.as_str();
    let held = m.held.filter(|_| m.provider == KIND).ok_or_else(|| {
        p.cannot(
            name,
            &format!(
                "start from checkpoint {:?}: it is not a Docker box's",
                m.name
            ),
        )
    })?;
    let engine = p.engine(new.engine.or(held.engine.as_deref()), new.source)?;
    crate::ledger::note(&p.home, &engine.endpoint().host)?;
    if engine.image(&held.image_id).map_err(remote)?.is_none() {
        return Err(BoxError::CheckpointUnusable {
            name: m.name.to_owned(),
            why: format!(
                "its image {} ({}) is not on the Docker engine at {}",
                held.image,
                held.image_id,
                engine.endpoint().shown()
            ),
        });
    }
    let container = names::container(name);
    if engine.container(&container).map_err(remote)?.is_some() {
        return Err(failed(format!(
            "box {name:?}: a container named {container} already exists on the Docker engine at {}",
            engine.endpoint().shown()
        )));
    }
    let mut made = Made::default();
    match make(p, &engine, new, m, &held.image_id, &mut made, progress) {
        Ok((held, conflicts)) => Ok(NewTree {
            held,
            seeded: made.seeded.take().map(|s| s.repos).unwrap_or_default(),
            image: m.base_image.map(str::to_owned),
            conflicts,
        }),
        Err(e) => {
            made.undo(&engine, &container);
            Err(e)
        }
    }
}

/// The steps of a restore, noting in `made` what a failure must remove; the first node's
/// data and the conflicts.
fn make(
    p: &DockerProvider,
    engine: &Engine,
    new: &NewBox<'_>,
    m: &FromCheckpoint<'_>,
    image: &str,
    made: &mut Made,
    progress: &dyn Progress,
) -> Result<(Held, Vec<String>)> {
    let name = new.name.as_str();
    let settings = BoxSettings {
        env: &new.options.env,
        limits: &new.options.limits,
        network: new.options.network,
    };
    let container = names::container(name);
    engine
        .create_container(&spec::container(&p.home, name, image, &settings))
        .map_err(remote)?;
    made.container = true;
    p.stage_inbox(engine, name);
    let stage = format!("/.agentbox-reseed-{}", agentbox_core::id::new_id());
    progress.busy("seeding the fresh workspace", &mut || {
        let seeded = crate::seed::seed(&p.home, new, &std::env::temp_dir())?;
        let sent = send_stage(engine, &container, &stage, &seeded.tar);
        made.seeded = Some(seeded);
        sent
    })?;
    let seeded = made
        .seeded
        .as_ref()
        .map(|s| s.repos.clone())
        .unwrap_or_default();
    let mut plan = Vec::new();
    for r in &seeded {
        let carried = if new.seed.no_carry {
            Vec::new()
        } else {
            agentbox_git::carried_paths(&r.record.repo, name).map_err(BoxError::Seed)?
        };
        plan.push((r.record.sub.clone(), carried));
    }
    engine.start_container(&container).map_err(remote)?;
    let mut conflicts = Vec::new();
    progress.busy(
        "moving the checkpoint's repositories to the host's commit",
        &mut || {
            conflicts = merge(engine, &container, &stage, &plan)?;
            Ok(())
        },
    )?;
    let tag = names::node_tag(&p.home);
    let id = engine
        .commit(
            &container,
            names::NODE_REPO,
            &tag,
            &format!("box created from checkpoint {}", m.name),
            &names::labels(&p.home, name),
        )
        .map_err(remote)?;
    made.node_tag = Some(tag);
    // The box runs on its first node (see `crate::create`).
    engine.remove_container(&container).map_err(remote)?;
    made.container = false;
    engine
        .create_container(&spec::container(&p.home, name, &id, &settings))
        .map_err(remote)?;
    made.container = true;
    Ok((
        Held {
            by: KIND.to_owned(),
            object: id,
        },
        conflicts,
    ))
}

/// Send the workspace tar `tar` (entries `workspace/…`) into `stage` of `container`.
fn send_stage(engine: &Engine, container: &str, stage: &str, tar: &Path) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let top = dir.path().join("stage.tar");
    let mut b = tar::Builder::new(fs_err::File::create(&top)?);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o700);
    h.set_size(0);
    h.set_uid(0);
    h.set_gid(0);
    b.append_data(
        &mut h,
        format!("{}/", stage.trim_start_matches('/')),
        std::io::empty(),
    )?;
    b.into_inner()?;
    engine.upload_tar(container, "/", &top).map_err(remote)?;
    engine.upload_tar(container, stage, tar).map_err(remote)
}

/// The merge in `container` of `/workspace` with `<stage>/workspace`, for the
/// repositories of `plan` (each one's sub-directory and carried paths); the conflicts,
/// relative to `/workspace`. The stage is gone afterwards.
fn merge(
    engine: &Engine,
    container: &str,
    stage: &str,
    plan: &[(Option<String>, Vec<String>)],
) -> Result<Vec<String>> {
    let fresh_dir = format!("{stage}/workspace");
    let ws = container_fs::listing(engine, container, WORKSPACE)?;
    let fresh = container_fs::listing(engine, container, &fresh_dir)?;
    let subs: BTreeSet<PathBuf> = plan
        .iter()
        .filter_map(|(s, _)| s.as_ref().map(PathBuf::from))
        .collect();
    let mut carried = BTreeSet::new();
    for (sub, paths) in plan {
        let base = sub.as_ref().map(PathBuf::from).unwrap_or_default();
        carried.extend(paths.iter().map(|c| base.join(c)));
    }
    let mut kept = BTreeSet::new();
    if !plan.is_empty() {
        for (sub, _) in plan {
            let base = sub.as_ref().map(PathBuf::from).unwrap_or_default();
            if ws.get(&base.join(".git")) != Some(&Kind::Dir) {
                continue;
            }
            let dir = Path::new(WORKSPACE).join(&base);
            let ran = container_fs::run(
                engine,
                container,
                [
                    "git",
                    "-C",
                    &dir.to_string_lossy(),
                    "ls-files",
                    "-z",
                    "--others",
                    "--directory",
                ]
                .map(str::to_owned)
                .to_vec(),
                "git ls-files",
            )?;
            // A base without git, or a repository git cannot read, keeps nothing of this
            // repository: the box gets the fresh one whole (as locally).
            if ran.status != 0 {
                continue;
            }
            for p in ran.out.split(|b| *b == 0).filter(|p| !p.is_empty()) {
                let p = p.strip_suffix(b"/").unwrap_or(p);
                kept.insert(base.join(std::ffi::OsStr::from_bytes(p)));
            }
        }
        // A root that is no repository: no git tracks its other files, so the
        // checkpoint's stay; the host's copy of the same paths replaces them.
        if plan.iter().all(|(s, _)| s.is_some()) {
            kept.extend(
                ws.keys()
                    .filter(|p| p.components().count() == 1 && !subs.contains(*p))
                    .cloned(),
            );
        }
    }
    let removed = if plan.is_empty() {
        Vec::new()
    } else {
        reseed_plan::removals(&ws, &kept, &subs)
    };
    let left = reseed_plan::without(&ws, &removed);
    let m = reseed_plan::merge(&fresh, &left, &carried);
    let at = |dir: &str, rel: &Path| -> Vec<u8> {
        let mut v = dir.as_bytes().to_vec();
        v.push(b'/');
        v.extend_from_slice(rel.as_os_str().as_bytes());
        v
    };
    let gone: Vec<Vec<u8>> = removed.iter().map(|r| at(WORKSPACE, r)).collect();
    container_fs::xargs(
        engine,
        container,
        &["rm", "-rf", "--"],
        64,
        &gone.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        "removing what the checkpoint's git tracks",
    )?;
    let pairs = |rels: &[PathBuf]| -> Vec<Vec<u8>> {
        rels.iter()
            .flat_map(|r| [at(&fresh_dir, r), at(WORKSPACE, r)])
            .collect()
    };
    let moves = pairs(&m.moves);
    container_fs::xargs(
        engine,
        container,
        &["sh", "-c", "rm -rf -- \"$2\" && mv -- \"$1\" \"$2\"", "sh"],
        2,
        &moves.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        "moving the fresh workspace in",
    )?;
    let mut conflicts: Vec<PathBuf> = m.deleted_by_host;
    if !m.kept_by_box.is_empty() {
        let both = pairs(&m.kept_by_box);
        let said = container_fs::xargs(
            engine,
            container,
            &["sh", "-c", SAME_FILE, "sh"],
            2,
            &both.iter().map(Vec::as_slice).collect::<Vec<_>>(),
            "comparing the box's files with the host's",
        )?;
        let answers: Vec<&[u8]> = said.split(|b| *b == b'\n').collect();
        for (i, r) in m.kept_by_box.iter().enumerate() {
            // An answer missing or unreadable is a conflict: reported, never lost.
            if answers.get(i).copied() != Some(b"same".as_slice()) {
                conflicts.push(r.clone());
            }
        }
    }
    container_fs::xargs(
        engine,
        container,
        &["rm", "-rf", "--"],
        1,
        &[stage.as_bytes()],
        "removing the stage",
    )?;
    conflicts.sort();
    conflicts.dedup();
    Ok(conflicts
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect())
}
