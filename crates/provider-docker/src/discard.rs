//! A destroyed box's container let go of: stopped and removed when its engine answers;
//! when the engine does not (a remote machine down, a daemon stopped), left there and
//! queued in the engine ledger ([`crate::ledger::queue`]) with a warning, so that the
//! destruction of the box — its record and history, which are on this host — does not
//! wait for an engine that may never come back. `prune` removes the container once the
//! engine answers, as the container of a box that no longer exists, and takes it off the
//! queue once it is gone ([`settle_queue`]).

use std::sync::Arc;

use agentbox_boxes::provider::Provider;
use agentbox_boxes::records::record::{self, BoxDirs};
use agentbox_boxes::types::{BoxLeftover, PruneOutcome};
use agentbox_boxes::{BoxError, Result};
use agentbox_docker::{DockerError, Engine};

use crate::errors::remote;
use crate::names;
use crate::provider::{DockerProvider, KIND};

/// Let go of box `name`'s container (see the module's documentation); the warning when it
/// is left for `prune`.
pub fn discard(p: &DockerProvider, name: &str) -> Result<Option<String>> {
    let rec = record::read(&p.home, name)?;
    if rec.provider != KIND {
        return Err(BoxError::OtherProvider {
            name: name.to_owned(),
            provider: rec.provider,
        });
    }
    match p.try_engine(rec.engine.as_deref(), rec.project.as_deref())? {
        Ok(_) => {
            p.stop(name)?;
            p.forget(name);
            Ok(None)
        }
        Err((url, e @ DockerError::Unreachable { .. })) => {
            let container = names::container(name);
            crate::ledger::queue(&p.home, &url, &container)?;
            Ok(Some(format!(
                "{e}: box {name:?}'s container {container} stays there; `agentbox prune` removes it once the engine answers"
            )))
        }
        Err((_, e)) => Err(remote(e)),
    }
}

/// The queued containers (see the module's documentation), each looked for on its engine
/// (one of `engines`, those `prune` reached, or connected now): one on an engine that does
/// not answer is reported kept; one still there — this home's, made before its box was
/// destroyed (a later one of that name is another box's), its box gone — is removed
/// unless `dry_run`; one gone comes off the queue. One `prune` reported already
/// (`reported`, as the container of a box that no longer exists) is not reported twice.
pub(crate) fn settle_queue(
    p: &DockerProvider,
    engines: &[Arc<Engine>],
    dry_run: bool,
    reported: &[BoxLeftover],
) -> Result<Vec<BoxLeftover>> {
    let key = names::home_key(&p.home);
    let mut out = Vec::new();
    for q in crate::ledger::queued(&p.home)? {
        let engine = match engines.iter().find(|e| e.endpoint().host == q.engine) {
            Some(e) => Some(Arc::clone(e)),
            None => p.try_engine(Some(&q.engine), None)?.ok(),
        };
        let what = format!(
            "the container of a box destroyed while its engine did not answer, on {}",
            q.engine
        );
        let Some(engine) = engine else {
            out.push(BoxLeftover {
                kind: "container".into(),
                what,
                target: q.container.clone(),
                outcome: PruneOutcome::Kept(format!(
                    "the Docker engine at {} did not answer",
                    q.engine
                )),
            });
            continue;
        };
        let since = q.since.timestamp();
        let left = engine
            .containers_labelled(names::HOME_LABEL, &key)
            .map_err(remote)?
            .into_iter()
            .find(|c| c.name == q.container)
            .filter(|c| c.created.is_none_or(|t| t <= since))
            .filter(|c| {
                c.labels
                    .get(names::BOX_LABEL)
                    .is_none_or(|b| !BoxDirs::new(&p.home, b).record().exists())
            });
        let seen = |c: &agentbox_docker::container::ContainerInfo| {
            reported
                .iter()
                .any(|l| l.kind == "container" && l.target == c.name)
        };
        let gone = match left {
            None => true,
            // Reported (as would be removed, or kept and why) by prune already.
            Some(c) if seen(&c) => false,
            Some(c) => {
                let outcome = if dry_run {
                    PruneOutcome::WouldRemove
                } else {
                    match engine.remove_container(&c.name) {
                        Ok(_) => PruneOutcome::Removed,
                        Err(e) => PruneOutcome::Kept(e.to_string()),
                    }
                };
                let gone = outcome == PruneOutcome::Removed;
                out.push(BoxLeftover {
                    kind: "container".into(),
                    what,
                    target: c.name.clone(),
                    outcome,
                });
                gone
            }
        };
        if gone && !dry_run {
            crate::ledger::unqueue(&p.home, &q)?;
        }
    }
    Ok(out)
}
