//! A new box: its image checked (or built), its container made hardened, its workspace
//! sent in, and its first node committed — and on any failure, nothing of it left: no
//! container, no node image, no branch or pin in a host repository.
//!
//! The container the box runs in is made from the first node's image, not from the base
//! image the workspace was sent onto: a box's container then differs from its image by
//! exactly what the box changed ([`crate::capture`] relies on it). It is started, and must
//! stay up ([`crate::came_up`]): a box whose container dies at once is no box.

use agentbox_boxes::progress::Progress;
use agentbox_boxes::provider::{NewBox, NewTree, Provider};
use agentbox_boxes::Result;
use agentbox_docker::Engine;
use agentbox_store::Held;

use crate::errors::remote;
use crate::names;
use crate::provider::{DockerProvider, KIND};
use crate::spec::{self, BoxSettings};

/// What a failed create (or restore from a checkpoint) removes.
#[derive(Default)]
pub(crate) struct Made {
    pub(crate) container: bool,
    pub(crate) node_tag: Option<String>,
    pub(crate) seeded: Option<crate::seed::Seeded>,
}

impl Made {
    /// Take back what was made: container `container`, the first node's image, the host's
    /// seeding refs. Best effort: the error that failed the create is the one reported.
    pub(crate) fn undo(&self, engine: &Engine, container: &str) {
        if self.container {
            let _ = engine.remove_container(container);
        }
        if let Some(tag) = &self.node_tag {
            let _ = engine.remove_image(&format!("{}:{tag}", names::NODE_REPO));
        }
        if let Some(s) = &self.seeded {
            s.undo();
        }
    }
}

/// Make box `new.name` (see the module's documentation).
pub fn create_tree(
    p: &DockerProvider,
    new: &NewBox<'_>,
    progress: &dyn Progress,
) -> Result<NewTree> {
    if !new.options.publish.is_empty() {
        return Err(p.cannot(new.name.as_str(), "publish a box's ports yet (--publish)"));
    }
    if let Some(m) = new.checkpoint {
        return crate::restore::create_tree(p, new, m, progress);
    }
    let engine = p.engine(new.engine, new.source)?;
    // Before anything is made there: prune must look on it from now on.
    crate::ledger::note(&p.home, &engine.endpoint().host)?;
    let image = crate::image::base(p, &engine, new, progress)?;
    let container = names::container(new.name);
    if engine.container(&container).map_err(remote)?.is_some() {
        return Err(crate::errors::failed(format!(
            "box {:?}: a container named {container} already exists on the Docker engine at {}",
            new.name.as_str(),
            engine.endpoint().shown()
        )));
    }
    let mut made = Made::default();
    match make(p, &engine, new, &image, &mut made, progress) {
        Ok(held) => Ok(NewTree {
            held,
            seeded: made.seeded.take().map(|s| s.repos).unwrap_or_default(),
            image: Some(image),
            conflicts: Vec::new(),
        }),
        Err(e) => {
            made.undo(&engine, &container);
            Err(e)
        }
    }
}

/// The steps of a create, noting in `made` what a failure must remove.
fn make(
    p: &DockerProvider,
    engine: &Engine,
    new: &NewBox<'_>,
    image: &str,
    made: &mut Made,
    progress: &dyn Progress,
) -> Result<Held> {
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
    // In the first node: every container made from the box's nodes has it.
    p.stage_inbox(engine, name);
    progress.busy("copying the workspace", &mut || {
        let seeded = crate::seed::seed(&p.home, new, &std::env::temp_dir())?;
        let sent = engine
            .upload_tar(&container, "/", &seeded.tar)
            .map_err(remote);
        made.seeded = Some(seeded);
        sent
    })?;
    let tag = names::node_tag(&p.home);
    let message = match new.source {
        Some(s) => format!("box created from {}", s.display()),
        None => "box created".to_owned(),
    };
    let id = engine
        .commit(
            &container,
            names::NODE_REPO,
            &tag,
            &message,
            &names::labels(&p.home, name),
        )
        .map_err(remote)?;
    made.node_tag = Some(tag);
    // The box runs on its first node (see the module's documentation).
    engine.remove_container(&container).map_err(remote)?;
    made.container = false;
    engine
        .create_container(&spec::container(&p.home, name, &id, &settings))
        .map_err(remote)?;
    made.container = true;
    crate::came_up::start(engine, name)?;
    Ok(Held {
        by: KIND.to_owned(),
        object: id,
    })
}
