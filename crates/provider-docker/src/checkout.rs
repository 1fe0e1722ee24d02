//! A box moved to another node: the store's HEAD moves ([`agentbox_store::Store::checkout_held`]),
//! then the container is made again from the node's image — its processes killed, as a
//! local checkout kills them — and started when it was running.
//!
//! Crash order: HEAD moves first. A crash before the container is remade leaves the old
//! container with HEAD on the new node (the next checkout, of HEAD say, remakes it), or no
//! container, which the box's next command makes from HEAD ([`crate::remake`]).

use agentbox_boxes::provider::CheckedOut;
use agentbox_boxes::Result;
use agentbox_store::Store;

use crate::errors::remote;
use crate::names;
use crate::provider::{DockerProvider, KIND};

/// Check out `reference` in box `name` (see the module's documentation).
pub fn checkout(p: &DockerProvider, name: &str, reference: &str) -> Result<CheckedOut> {
    let (rec, engine) = p.boxed(name)?;
    let _lock = p.history_lock(name, "checkout")?;
    let container = names::container(name);
    let was = engine.container(&container).map_err(remote)?;
    let running = was.as_ref().is_some_and(|c| c.running);
    let killed = if running {
        crate::procs::count(&engine, name).unwrap_or(0)
    } else {
        0
    };
    let store = Store::open(&p.home.store_dir())?;
    let (node, held) = store.checkout_held(name, reference, KIND)?;
    // Best effort: background processes whose end is not noted now are noted later as
    // ended with their container.
    let _ = crate::spawn::before_remake(p, &engine, name);
    crate::remake::remake(p, &engine, &rec, &held.object)?;
    if running {
        engine.start_container(&container).map_err(remote)?;
    }
    Ok(CheckedOut {
        node: node.id.into_string(),
        killed,
    })
}
