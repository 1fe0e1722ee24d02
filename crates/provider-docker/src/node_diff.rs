//! `show` and `diff` of a Docker box ([`agentbox_boxes::provider::Provider::changes`]):
//! between two nodes by their manifests ([`crate::manifest`]), from HEAD to the running
//! container by the engine's list of its changes ([`crate::capture::since_head`]); with
//! `patch`, each changed file's content read through the engine from a look at each node
//! (or from the box's container for the working tree) and compared on the host.

use agentbox_boxes::history::nodes::Patched;
use agentbox_boxes::Result;
use agentbox_store::fsops::Change;
use agentbox_store::{Node, Store};

use crate::errors::failed;
use crate::manifest::{self, Look};
use crate::names;
use crate::provider::DockerProvider;

/// The image of node `node` of box `name`.
fn image_of(store: &Store, name: &str, node: &Node) -> Result<String> {
    match store.held_of(node)? {
        Some(held) => Ok(held.object),
        None => Err(failed(format!(
            "box {name:?}: node {} has no image recorded",
            node.id.as_str()
        ))),
    }
}

/// What changed from node `from` to node `to` (`None`: the box's container, which must
/// then be on HEAD's node), with content when `patch`.
pub fn changes(
    p: &DockerProvider,
    name: &str,
    from: &Node,
    to: Option<&Node>,
    patch: bool,
) -> Result<Vec<Patched>> {
    let (rec, engine) = p.boxed(name)?;
    let store = Store::open(&p.home.store_dir())?;
    let old_image = image_of(&store, name, from)?;
    let spool = agentbox_boxes::records::record::BoxDirs::new(&p.home, name).dir;
    let (list, new_look): (Vec<Change>, Option<Look>) = match to {
        Some(to) => {
            let new_image = image_of(&store, name, to)?;
            let a = manifest::of_image(p, &engine, &rec, &old_image)?;
            let b = manifest::of_image(p, &engine, &rec, &new_image)?;
            let look = if patch {
                Some(Look::new(p, &engine, name, &new_image)?)
            } else {
                None
            };
            (manifest::diff(&a, &b), look)
        }
        None => {
            if store.env(name)?.head != from.id {
                return Err(agentbox_boxes::provider::Provider::cannot(
                    p,
                    name,
                    "list the changes from a node other than HEAD to the working tree yet",
                ));
            }
            let list = crate::capture::since_head(p, name)?
                .into_iter()
                .map(|(path, kind)| Change {
                    path: path.into(),
                    kind,
                    old_size: None,
                    new_size: None,
                    detail: None,
                })
                .collect();
            (list, None)
        }
    };
    if !patch {
        return Ok(list
            .into_iter()
            .map(|change| Patched {
                change,
                patch: None,
            })
            .collect());
    }
    let old_look = Look::new(p, &engine, name, &old_image)?;
    let box_container = names::container(name);
    let new_container = new_look
        .as_ref()
        .map_or(box_container.as_str(), |l| l.container.as_str());
    list.into_iter()
        .map(|change| {
            use agentbox_store::fsops::ChangeKind as K;
            let old = (change.kind != K::Added).then_some(old_look.container.as_str());
            let new = (change.kind != K::Removed).then_some(new_container);
            let patch = manifest::patch(&engine, &change, old, new, &spool)?;
            Ok(Patched { change, patch })
        })
        .collect()
}
