//! What exists in an agentbox home, on disk: each box's record and directory (`record`),
//! how boxes are named, numbered and found (`registry`), the base images a box may run on
//! (`images`), and the ignore patterns a record carries (`ignore`).
//!
//! It owns the files under `<home>/boxes/` and `<home>/images/` and nothing else: it never
//! reaches the store or a running box (that is the façade's, through the provider), and it
//! knows nothing of how a box is made, started or checkpointed.

pub mod ignore;
pub mod images;
pub mod record;
pub mod registry;
