//! `prune --all` on the engines of this home: the `agentbox-ckpt-*` tags of this home's
//! images ([`names::HOME_LABEL`]) that no checkpoint's manifest and no box names
//! ([`NamedCheckpoints`]) — a manifest removed or lost by hand, an import or capture
//! interrupted after the tag, a tag someone added — removed, older than the grace period.
//! Removing a tag takes the image with its last one unless a container or a later image
//! still uses it (the engine keeps it then); a node that still names the image keeps its
//! data as plain `prune` says ([`crate::prune`]).
//!
//! The engines looked at are those [`crate::prune`] looks at; one that does not answer is
//! reported (its tags kept).

use std::sync::Arc;

use agentbox_boxes::types::{BoxLeftover, NamedCheckpoints, PruneOutcome};
use agentbox_boxes::Result;
use agentbox_docker::Engine;

use crate::names;
use crate::provider::{DockerProvider, KIND};

/// The prefix of every checkpoint image's repository ([`names::checkpoint_repo`]).
const CHECKPOINT_PREFIX: &str = "agentbox-ckpt-";

/// See the module's documentation.
pub fn prune_checkpoint_tags(
    p: &DockerProvider,
    named: &NamedCheckpoints,
    grace: std::time::Duration,
    dry_run: bool,
) -> Result<Vec<BoxLeftover>> {
    let mut out = Vec::new();
    let key = names::home_key(&p.home);
    let cutoff =
        chrono::Utc::now().timestamp() - i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    for engine in engines(p, &mut out)? {
        let images = engine
            .images_labelled(names::HOME_LABEL, &key)
            .map_err(crate::errors::remote)?;
        for i in images {
            if i.created.is_some_and(|c| c > cutoff) || named.images.contains(&i.id) {
                continue;
            }
            for tag in i.tags.iter().filter(|t| t.starts_with(CHECKPOINT_PREFIX)) {
                if is_named(named, tag) {
                    continue;
                }
                let outcome = if dry_run {
                    PruneOutcome::WouldRemove
                } else {
                    match engine.remove_image(tag) {
                        Ok(_) => PruneOutcome::Removed,
                        Err(e) => PruneOutcome::Kept(e.to_string()),
                    }
                };
                out.push(BoxLeftover {
                    kind: "checkpoint-image".into(),
                    what: format!(
                        "checkpoint image {tag}, which no checkpoint or box names, on {}",
                        engine.endpoint().shown()
                    ),
                    target: tag.clone(),
                    outcome,
                });
            }
        }
    }
    Ok(out)
}

/// Whether tag `tag` (`agentbox-ckpt-<project key>:<name>`) is one a manifest or a box
/// names.
fn is_named(named: &NamedCheckpoints, tag: &str) -> bool {
    if named.images.contains(tag) {
        return true;
    }
    let Some((repo, name)) = tag.rsplit_once(':') else {
        return false;
    };
    let Some(project_key) = repo.strip_prefix(CHECKPOINT_PREFIX) else {
        return false;
    };
    named
        .checkpoints
        .contains(&(project_key.to_owned(), name.to_owned()))
}

/// The engines of this home's Docker boxes and ledger, each once; one that does not answer
/// is a row of `out` (kept) when a Docker box of the home still uses it.
fn engines(p: &DockerProvider, out: &mut Vec<BoxLeftover>) -> Result<Vec<Arc<Engine>>> {
    let live: Vec<_> = agentbox_boxes::records::record::list(&p.home)?
        .into_iter()
        .filter(|r| r.provider == KIND)
        .collect();
    let mut wanted: Vec<(Option<String>, Option<std::path::PathBuf>)> =
        crate::ledger::engines(&p.home)?
            .into_iter()
            .map(|url| (Some(url), None))
            .collect();
    wanted.extend(live.iter().map(|r| (r.engine.clone(), r.project.clone())));
    let mut engines: Vec<Arc<Engine>> = Vec::new();
    for (given, project) in &wanted {
        match p.engine(given.as_deref(), project.as_deref()) {
            Ok(e)
                if engines
                    .iter()
                    .any(|o| o.endpoint().host == e.endpoint().host) => {}
            Ok(e) => engines.push(e),
            Err(e) => out.push(BoxLeftover {
                kind: "engine".into(),
                what: "the Docker engine of boxes of this home".into(),
                target: given.clone().unwrap_or_else(|| "(default)".into()),
                outcome: PruneOutcome::Kept(e.to_string()),
            }),
        }
    }
    Ok(engines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_named_by_its_image_name_or_by_its_project_and_checkpoint() {
        let mut named = NamedCheckpoints::default();
        named.images.insert("agentbox-ckpt-pabc:kept".into());
        named
            .checkpoints
            .insert(("pabc".to_owned(), "from-a-box".to_owned()));
        assert!(is_named(&named, "agentbox-ckpt-pabc:kept"));
        assert!(is_named(&named, "agentbox-ckpt-pabc:from-a-box"));
        assert!(!is_named(&named, "agentbox-ckpt-pabc:stray"));
        assert!(!is_named(&named, "agentbox-ckpt-pother:from-a-box"));
        assert!(!is_named(&named, "agentbox-node:from-a-box"));
    }
}
