//! What names a checkpoint now, for `prune --all`: every project's manifests (the images
//! they keep) and every box's record (the checkpoint it was made from, its image). A
//! provider removes the names of its checkpoints' data none of these names
//! ([`crate::provider::Provider::prune_checkpoint_names`]).

use crate::facade::Boxes;
use crate::Result;

impl Boxes {
    /// What names a checkpoint now (see the module's documentation).
    pub(crate) fn named_checkpoints(&self) -> Result<crate::types::NamedCheckpoints> {
        let mut named = crate::types::NamedCheckpoints::default();
        for (_, m) in crate::checkpoints::checkpoint::manifests(self.home(), None)? {
            named.checkpoints.insert((
                crate::checkpoints::checkpoint::project_key(m.project.as_deref()),
                m.name.clone(),
            ));
            if let Some(h) = &m.held {
                named.images.insert(h.image.clone());
                named.images.insert(h.image_id.clone());
            }
        }
        for rec in crate::records::record::list(self.home())? {
            if let Some(c) = &rec.checkpoint {
                named.checkpoints.insert((
                    crate::checkpoints::checkpoint::project_key(rec.project.as_deref()),
                    c.clone(),
                ));
            }
            if let Some(i) = &rec.image {
                named.images.insert(i.clone());
            }
        }
        Ok(named)
    }
}
