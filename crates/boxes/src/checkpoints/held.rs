//! Checkpoints of boxes whose trees their provider holds (a Docker box's): the provider
//! makes the capture where it keeps trees (an image, cleaned up, layered or flattened, see
//! [`crate::provider::Provider::checkpoint_tree`]), and the store keeps it as a detached
//! node naming that data, the checkpoint's ref pointing at it — the commit point, as for a
//! local checkpoint. A failure before the ref is written removes the capture again.

use agentbox_store::derive::DetachOpts;
use agentbox_store::DetachedHow;

use crate::facade::Boxes;
use crate::provider::{CheckpointAsk, CheckpointTree, HeldCheckpoint};
use crate::records::record::BoxRecord;
use crate::Result;

/// Capture box `rec` as `ask` says, kept as store ref `full_ref`: the checkpoint's node,
/// what the provider made, and where it keeps it.
pub(crate) fn capture(
    boxes: &Boxes,
    rec: &BoxRecord,
    ask: &CheckpointAsk<'_>,
    full_ref: &str,
) -> Result<(String, CheckpointTree, HeldCheckpoint)> {
    let provider = boxes.provider_of(&rec.name)?;
    if !rec.repos.is_empty() {
        // The manifest records the branches' tips as the host has them: brought there
        // first (a box whose git cannot say keeps the tips of its last sync).
        let _ = provider.sync(&rec.name);
    }
    let tree = provider.checkpoint_tree(&rec.name, ask)?;
    let held = HeldCheckpoint {
        engine: rec.engine.clone(),
        image: tree.image.clone(),
        image_id: tree.held.object.clone(),
    };
    let how = if ask.flatten {
        DetachedHow::Flatten
    } else {
        DetachedHow::Derive
    };
    let message = format!(
        "checkpoint {}{} of box {}",
        ask.name,
        if ask.flatten { " (flattened)" } else { "" },
        rec.name
    );
    let node = boxes.store().and_then(|store| {
        Ok(store.detach_held(
            &rec.name,
            ask.node,
            tree.held.clone(),
            how,
            DetachOpts::new(full_ref, message),
        )?)
    });
    let node = match node {
        Ok(n) => n,
        Err(e) => {
            let _ = provider.remove_checkpoint_tree(rec.project.as_deref(), &held);
            return Err(e);
        }
    };
    Ok((node.id.into_string(), tree, held))
}
