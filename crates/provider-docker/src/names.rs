//! The names a box's objects carry on an engine.
//!
//! * container `agentbox-<box>`;
//! * node images `agentbox-node:<home key>-<random id>`: every node image has a tag of its
//!   own, so that `docker image prune` (which removes untagged images) never takes a
//!   box's history, and removing one node's tag leaves the others' images alone;
//! * checkpoint images `agentbox-ckpt-<project key>:<checkpoint>` ([`checkpoint_repo`]),
//!   labelled [`HOME_LABEL`] and [`CHECKPOINT_LABEL`] but with no box: a checkpoint is
//!   its project's, and outlives the box it was made from;
//! * labels on both: [`BOX_LABEL`]`=<box>` and [`HOME_LABEL`]`=<home key>`, the key being
//!   the BLAKE3 hash of the agentbox home's path — two homes on one engine never touch
//!   each other's containers or images.

use std::collections::HashMap;

use agentbox_core::home::Home;

/// The label naming the box a container or image belongs to.
pub const BOX_LABEL: &str = "agentbox.box";
/// The label naming the agentbox home (its key, [`home_key`]).
pub const HOME_LABEL: &str = "agentbox.home";
/// The label marking a container made only to read a node ([`crate::manifest::Look`]).
pub const LOOK_LABEL: &str = "agentbox.look";
/// The label naming the checkpoint an image is.
pub const CHECKPOINT_LABEL: &str = "agentbox.checkpoint";
/// The repository of node images.
pub const NODE_REPO: &str = "agentbox-node";
/// The repository of images built from a Dockerfile (`--dockerfile`), tagged with the
/// fingerprint of their build context.
pub const BUILT_REPO: &str = "agentbox-image";

/// Box `name`'s container.
pub fn container(name: &str) -> String {
    format!("agentbox-{name}")
}

/// The key of agentbox home `home`: the first 16 hex digits of the BLAKE3 hash of its path.
pub fn home_key(home: &Home) -> String {
    blake3::hash(home.root().as_os_str().as_encoded_bytes()).to_hex()[..16].to_owned()
}

/// The labels of box `name`'s container and images in home `home`.
pub fn labels(home: &Home, name: &str) -> HashMap<String, String> {
    [
        (BOX_LABEL.to_owned(), name.to_owned()),
        (HOME_LABEL.to_owned(), home_key(home)),
    ]
    .into()
}

/// A fresh tag for a node image of home `home`.
pub fn node_tag(home: &Home) -> String {
    format!("{}-{}", home_key(home), agentbox_core::id::new_id())
}

/// The repository of the checkpoint images of the project whose key is `project_key`
/// (`p<hash>`, `none`).
pub fn checkpoint_repo(project_key: &str) -> String {
    format!("agentbox-ckpt-{project_key}")
}
