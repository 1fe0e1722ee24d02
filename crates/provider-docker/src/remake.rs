//! A box's container made (again) from one of its nodes' images: at a checkout, and when
//! the container is gone — removed behind agentbox's back, or a checkout interrupted
//! between removing the old container and making the new one — from HEAD's, so that the
//! box runs again on the tree its history says it has (what was not committed in the lost
//! container is lost with it).

use agentbox_boxes::records::record::BoxRecord;
use agentbox_boxes::Result;
use agentbox_docker::Engine;
use agentbox_store::Store;

use crate::errors::remote;
use crate::names;
use crate::provider::{DockerProvider, KIND};
use crate::spec::{self, BoxSettings};

/// Make box `rec`'s container on `image` (its old one removed first, if any) and forget
/// what the last node saw of the old one. The new container is not started.
pub(crate) fn remake(
    p: &DockerProvider,
    engine: &Engine,
    rec: &BoxRecord,
    image: &str,
) -> Result<()> {
    let name = rec.name.as_str();
    engine
        .remove_container(&names::container(name))
        .map_err(remote)?;
    crate::capture::reset(p, name)?;
    let settings = BoxSettings {
        env: &rec.env,
        limits: &rec.limits,
        network: rec.network,
    };
    engine
        .create_container(&spec::container(&p.home, name, image, &settings))
        .map_err(remote)?;
    p.stage_inbox(engine, name);
    Ok(())
}

/// Make box `rec`'s container from HEAD's image when it is gone; whether it was.
pub(crate) fn restore_if_gone(
    p: &DockerProvider,
    engine: &Engine,
    rec: &BoxRecord,
) -> Result<bool> {
    let name = rec.name.as_str();
    if engine
        .container(&names::container(name))
        .map_err(remote)?
        .is_some()
    {
        return Ok(false);
    }
    let _lock = p.history_lock(name, "restore the container")?;
    // Made meanwhile by whoever held the lock.
    if engine
        .container(&names::container(name))
        .map_err(remote)?
        .is_some()
    {
        return Ok(false);
    }
    let store = Store::open(&p.home.store_dir())?;
    let head = store.node(&store.env(name)?.head)?;
    let held = store
        .held_of(&head)?
        .filter(|h| h.by == KIND)
        .ok_or_else(|| {
            crate::errors::failed(format!(
                "box {name:?}: its HEAD {} has no image of the docker provider",
                head.id.as_str()
            ))
        })?;
    remake(p, engine, rec, &held.object)?;
    Ok(true)
}
