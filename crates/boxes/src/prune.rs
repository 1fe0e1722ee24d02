//! `prune`: what boxes, interrupted tournaments and store operations left behind, and
//! checkpoints that can no longer be used. A module of its own above `lifecycle` and
//! `history`, since it takes from both (a tournament's candidates are boxes).

use crate::facade::Boxes;
use crate::lifecycle::directories::Pruned;
use crate::Result;

impl Boxes {
    /// Remove what boxes and interrupted store operations left behind (older than `grace`;
    /// `dry_run`: only say what would go), and checkpoints that can no longer be used. Box
    /// leftovers go first: removing a half-created box may leave its environment's data,
    /// which the store's pass then finds.
    pub fn prune(&self, grace: std::time::Duration, dry_run: bool) -> Result<Pruned> {
        self.prune_all(grace, dry_run, false)
    }

    /// [`Boxes::prune`], and with `all` (`prune --all`) the names providers keep
    /// checkpoints under (a Docker checkpoint image's tag) that no checkpoint's manifest
    /// and no box names, after the unusable checkpoints went.
    pub fn prune_all(
        &self,
        grace: std::time::Duration,
        dry_run: bool,
        all: bool,
    ) -> Result<Pruned> {
        // Not reconciled on open: half-made store data is what this reports and removes.
        let store = self.store_unreconciled()?;
        // Every provider's: a Docker box's leftovers are on its engine, not this host.
        // Interrupted tournaments' candidates first: their boxes go whole.
        let mut boxes = crate::history::tournament::prune_interrupted(self, dry_run)?;
        for provider in self.providers() {
            boxes.extend(provider.prune(&store, grace, dry_run)?);
        }
        boxes.extend(self.prune_checkpoints(&store, dry_run)?);
        if all {
            let named = self.named_checkpoints()?;
            for provider in self.providers() {
                boxes.extend(provider.prune_checkpoint_names(&named, grace, dry_run)?);
            }
        }
        let store = store.prune_leftovers(dry_run)?;
        Ok(Pruned { boxes, store })
    }
}
