//! Warm checkpoints: a project's named captures of a box (`checkpoint`: making, listing,
//! promoting and removing them, and whether one is still fresh) and moving one between
//! agentbox homes as one file (`transfer`; a provider-held one's image, `held_transfer`).
//!
//! It owns the checkpoint refs of the store and their manifests under `<home>/projects/`.
//! It never makes a box: a box made from a checkpoint is the create transaction's work
//! (`lifecycle::reseed`), which reads the manifests here; and it reaches a running box only
//! through the façade's provider operations (a capture commits through the provider).

pub mod checkpoint;
pub(crate) mod held;
pub mod held_transfer;
pub(crate) mod named;
pub mod transfer;
