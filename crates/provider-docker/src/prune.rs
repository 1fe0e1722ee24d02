//! What Docker boxes leave on their engines, found and removed:
//!
//! * `image`: node images GC (or retention) freed — the store's release queue for this
//!   provider ([`agentbox_store::Store::released`]) — removed from every engine a box of
//!   this home uses or was made on ([`crate::ledger`]; an image already gone is fine), then
//!   their queue entries (kept while one of those engines does not answer, or while a
//!   container of the home still runs on the image; an image another node still names
//!   stays, its entry goes);
//! * `container` and `image`: containers and images labelled with this home whose box no
//!   longer exists (a create or destroy interrupted), older than the grace period, and
//!   node images of a live box that lost their tag and that no container uses, and
//!   containers made to read a node ([`crate::manifest::Look`]) older than the grace
//!   period, whatever their box, and checkpoint images no node names (a checkpoint
//!   removed, or one whose capture was interrupted). Images built from a Dockerfile (no
//!   box label) stay.
//!
//! * `container`: a destroyed box's container queued while its engine did not answer
//!   ([`crate::discard::settle_queue`]), removed once it answers, reported kept until then.
//!
//! The engines looked at are those of the home's Docker boxes and of its ledger
//! ([`crate::ledger`]): a home that never had a Docker box asks no engine. One that does
//! not answer is reported (its leftovers kept) when something of this home still needs it
//! — a Docker box, a queued image — and passed over otherwise.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agentbox_boxes::records::record::BoxDirs;
use agentbox_boxes::types::{BoxLeftover, PruneOutcome};
use agentbox_boxes::Result;
use agentbox_core::home::Home;
use agentbox_docker::{DockerError, Engine};
use agentbox_store::Store;

use crate::names;
use crate::provider::{DockerProvider, KIND};

/// Remove box `name`'s container when it is this home's (another home's box of the same
/// name is left alone). `Ok(false)`: there was none of this home.
pub fn remove_own_container(
    home: &Home,
    engine: &Engine,
    name: &str,
) -> agentbox_docker::Result<bool> {
    let c = names::container(name);
    match engine.container(&c)? {
        Some(info) if info.labels.get(names::HOME_LABEL) == Some(&names::home_key(home)) => {
            engine.remove_container(&c)
        }
        _ => Ok(false),
    }
}

/// Remove node image `id`: its tags (the image goes with its last one, unless a later
/// node's image is built on it, which keeps it as its parent), or the image itself when it
/// has none (one kept as a parent stays, to go with its last child). `Ok(false)`: it was
/// gone, or stays as a parent.
pub fn remove_node_image(engine: &Engine, id: &str) -> agentbox_docker::Result<bool> {
    let Some(info) = engine.image(id)? else {
        return Ok(false);
    };
    let tags: Vec<&String> = info
        .tags
        .iter()
        .filter(|t| !t.starts_with("<none>"))
        .collect();
    if tags.is_empty() {
        // Untagged already: the parent of a later node's image goes with its last child.
        return match engine.remove_image(id) {
            Err(agentbox_docker::DockerError::ImageInUse { .. }) => Ok(false),
            other => other,
        };
    }
    for t in tags {
        engine.remove_image(t)?;
    }
    Ok(true)
}

/// The Docker boxes of `home`.
fn boxes(home: &Home) -> Result<Vec<agentbox_boxes::records::record::BoxRecord>> {
    Ok(agentbox_boxes::records::record::list(home)?
        .into_iter()
        .filter(|r| r.provider == KIND)
        .collect())
}

/// See the module's documentation.
pub fn prune(
    p: &DockerProvider,
    store: &Store,
    grace: std::time::Duration,
    dry_run: bool,
) -> Result<Vec<BoxLeftover>> {
    let live = boxes(&p.home)?;
    let released = store.released(KIND)?;
    let used =
        !live.is_empty() || !released.is_empty() || !crate::ledger::queued(&p.home)?.is_empty();
    let mut out = Vec::new();
    let mut engines: Vec<Arc<Engine>> = Vec::new();
    // A freed image may be on any of them: its queue entry stays until all answered.
    let mut unreachable = None;
    // Where boxes were made (by URL), and where the live ones are (by their names).
    let mut wanted: Vec<(Option<String>, Option<std::path::PathBuf>)> =
        crate::ledger::engines(&p.home)?
            .into_iter()
            .map(|url| (Some(url), None))
            .collect();
    wanted.extend(live.iter().map(|r| (r.engine.clone(), r.project.clone())));
    for (given, project) in &wanted {
        match p.engine(given.as_deref(), project.as_deref()) {
            // Two names of one engine (the default and a named host, say) are one.
            Ok(e)
                if engines
                    .iter()
                    .any(|o| o.endpoint().host == e.endpoint().host) => {}
            Ok(e) => engines.push(e),
            Err(e) => {
                let shown = given.clone().unwrap_or_else(|| "(default)".into());
                unreachable = Some(format!("the Docker engine {shown} did not answer"));
                if used {
                    out.push(BoxLeftover {
                        kind: "engine".into(),
                        what: "the Docker engine of boxes of this home".into(),
                        target: shown,
                        outcome: PruneOutcome::Kept(e.to_string()),
                    });
                }
            }
        }
    }
    let key = names::home_key(&p.home);
    let referenced = held_objects(store)?;
    // The images this home's containers run on: a freed node's image a box still runs on
    // (the node it was made or checked out from) stays until its container is made again.
    let mut running_on: HashMap<String, String> = HashMap::new();
    for engine in &engines {
        for c in engine
            .containers_labelled(names::HOME_LABEL, &key)
            .map_err(crate::errors::remote)?
        {
            running_on.insert(c.image, c.name);
        }
    }
    for (object, entry) in released {
        if referenced.contains(&object) {
            // Another node still names it (a fork's first node, an imported checkpoint's):
            // the image stays, and is queued again when that node is freed.
            if !dry_run {
                let _ = store.forget_released(&entry);
            }
            continue;
        }
        let outcome = if dry_run {
            PruneOutcome::WouldRemove
        } else if let Some(why) = &unreachable {
            PruneOutcome::Kept(why.clone())
        } else if let Some(container) = running_on.get(&object) {
            PruneOutcome::Kept(format!(
                "container {container} runs on it (it goes once the box's container is made again or the box is destroyed)"
            ))
        } else {
            let removed: std::result::Result<(), DockerError> = engines
                .iter()
                .try_for_each(|e| remove_node_image(e, &object).map(|_| ()));
            match removed {
                Ok(()) => match store.forget_released(&entry) {
                    Ok(()) => PruneOutcome::Removed,
                    Err(e) => PruneOutcome::Kept(e.to_string()),
                },
                Err(e) => PruneOutcome::Kept(e.to_string()),
            }
        };
        out.push(BoxLeftover {
            kind: "image".into(),
            what: "the image of a node GC freed".into(),
            target: object,
            outcome,
        });
    }
    let cutoff =
        chrono::Utc::now().timestamp() - i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let old = |created: Option<i64>| created.is_none_or(|c| c <= cutoff);
    let exists =
        |name: Option<&String>| name.is_some_and(|n| BoxDirs::new(&p.home, n).record().exists());
    for engine in &engines {
        let containers = engine
            .containers_labelled(names::HOME_LABEL, &key)
            .map_err(crate::errors::remote)?;
        for c in &containers {
            // A look at a node lives only as long as the diff that made it.
            let look = c.labels.contains_key(names::LOOK_LABEL);
            if (!look && exists(c.labels.get(names::BOX_LABEL))) || !old(c.created) {
                continue;
            }
            out.push(BoxLeftover {
                kind: "container".into(),
                what: if look {
                    format!(
                        "a container made to read a node, left by an interrupted diff, on {}",
                        engine.endpoint().shown()
                    )
                } else {
                    format!(
                        "the container of a box that no longer exists, on {}",
                        engine.endpoint().shown()
                    )
                },
                target: c.name.clone(),
                outcome: outcome(dry_run, || engine.remove_container(&c.name).map(|_| ())),
            });
        }
        // After the containers just removed: their images go in the same prune.
        let in_use: HashSet<String> = engine
            .containers_labelled(names::HOME_LABEL, &key)
            .map_err(crate::errors::remote)?
            .into_iter()
            .map(|c| c.image)
            .collect();
        for i in engine
            .images_labelled(names::HOME_LABEL, &key)
            .map_err(crate::errors::remote)?
        {
            if i.labels.contains_key(names::CHECKPOINT_LABEL) {
                // A checkpoint's image stays while a node names it (the checkpoint's, kept
                // by its ref, or the first of a box made from it); one no node names is
                // what an interrupted checkpoint left, or a removed one.
                if referenced.contains(&i.id) || !old(i.created) || in_use.contains(&i.id) {
                    continue;
                }
                out.push(BoxLeftover {
                    kind: "image".into(),
                    what: format!(
                        "a checkpoint's image no checkpoint or box names, on {}",
                        engine.endpoint().shown()
                    ),
                    target: i.id.clone(),
                    outcome: outcome(dry_run, || remove_node_image(engine, &i.id).map(|_| ())),
                });
                continue;
            }
            // Node images only: an image built from a Dockerfile carries no box, and
            // stays for the boxes still to be made from it.
            let Some(of) = i.labels.get(names::BOX_LABEL) else {
                continue;
            };
            // A node of another box (a fork's, a checkpoint's) may still be on the image of
            // a box that is gone: it stays while any node names it.
            let gone_box = !exists(Some(of)) && !referenced.contains(&i.id);
            let untagged = i.tags.iter().all(|t| t.starts_with("<none>"));
            let orphan = gone_box || untagged;
            if !orphan || !old(i.created) || in_use.contains(&i.id) {
                continue;
            }
            out.push(BoxLeftover {
                kind: "image".into(),
                what: if gone_box {
                    format!(
                        "an image of a box that no longer exists, on {}",
                        engine.endpoint().shown()
                    )
                } else {
                    format!("an untagged node image, on {}", engine.endpoint().shown())
                },
                target: i.id.clone(),
                outcome: outcome(dry_run, || remove_node_image(engine, &i.id).map(|_| ())),
            });
        }
    }
    let queued = crate::discard::settle_queue(p, &engines, dry_run, &out)?;
    out.extend(queued);
    Ok(out)
}

/// The objects (image ids) of this provider that nodes of `store` name.
pub(crate) fn held_objects(store: &Store) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    for node in store.nodes()?.values() {
        if let Some(h) = store.held_of(node)?.filter(|h| h.by == KIND) {
            out.insert(h.object);
        }
    }
    Ok(out)
}

fn outcome(dry_run: bool, remove: impl FnOnce() -> agentbox_docker::Result<()>) -> PruneOutcome {
    if dry_run {
        return PruneOutcome::WouldRemove;
    }
    match remove() {
        Ok(()) => PruneOutcome::Removed,
        Err(e) => PruneOutcome::Kept(e.to_string()),
    }
}
