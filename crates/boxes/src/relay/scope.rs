//! What a box may name from inside: the references of a request of the in-box `agentbox`
//! (see [`crate::relay`]) resolve in the box's own history only.
//!
//! On the host, a reference resolves store-wide: any node id or 4-hex prefix of any box,
//! project or versioned directory of the home, any store ref (`checkpoints/<project>/…`).
//! A box must not reach that far: it would read another box's files (`show`, `diff -p`),
//! run on another box's tree (`checkout`), keep one alive (`tag`), and learn other ids from
//! an ambiguous prefix. A [`Scope`] is the box's own history — the nodes reachable from its
//! HEAD, branch tips and tags, which include the checkpoint it was made from and that
//! checkpoint's ancestors — plus the refs of its own project's checkpoints that name one of
//! those nodes. Everything else resolves exactly as a node that does not exist: the same
//! error, the same text, and an ambiguous prefix lists only the box's own candidates.

use std::collections::{BTreeMap, BTreeSet};

use agentbox_core::id;
use agentbox_store::history::History;

use crate::facade::Boxes;
use crate::Result;

/// The nodes and names box `env` may refer to from inside.
#[derive(Debug, Clone)]
pub struct Scope {
    head: String,
    /// Every node of the history → its parent (through pending deletions, as `log` has it).
    parents: BTreeMap<String, Option<String>>,
    /// The box's tags whose node is in the history.
    tags: BTreeMap<String, String>,
    /// Store refs the box may name (its project's checkpoints of nodes in the history).
    refs: BTreeMap<String, String>,
}

/// How a reference of a relayed request reaches the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confined {
    /// `HEAD`, `HEAD~N`, `HEAD^N`: the store walks the box's own ancestry from its HEAD
    /// under its lock (so it stays relative to HEAD as the store has it then).
    HeadRelative(String),
    /// A node of the box's history, by full id.
    Node(String),
}

impl Confined {
    /// What to hand the store in place of the box's text.
    pub fn into_reference(self) -> String {
        match self {
            Confined::HeadRelative(r) | Confined::Node(r) => r,
        }
    }
}

impl Scope {
    /// The scope of `history`, with `refs` (store refs → node ids) cut down to those
    /// starting with `ref_prefix` and naming a node of the history.
    pub fn new(history: &History, refs: BTreeMap<String, String>, ref_prefix: &str) -> Scope {
        let parents: BTreeMap<String, Option<String>> = history
            .nodes
            .iter()
            .map(|n| {
                (
                    n.id.as_str().to_owned(),
                    n.parent.as_ref().map(|p| p.as_str().to_owned()),
                )
            })
            .collect();
        let tags = history
            .tags
            .iter()
            .filter(|(_, id)| parents.contains_key(id.as_str()))
            .map(|(t, id)| (t.clone(), id.clone()))
            .collect();
        let refs = refs
            .into_iter()
            .filter(|(r, id)| r.starts_with(ref_prefix) && parents.contains_key(id.as_str()))
            .collect();
        Scope {
            head: history.head.as_str().to_owned(),
            parents,
            tags,
            refs,
        }
    }

    /// Whether node `id` (a full id) is the box's to name.
    pub fn contains(&self, id: &str) -> bool {
        self.parents.contains_key(id)
    }

    /// Resolve `reference` as the store would for the box (`HEAD`, `HEAD~N`, a tag, a
    /// store ref, a full id, a unique id prefix of 4+ hex), but only to a node of the scope.
    /// Anything else — a node of another box, project or versioned directory, another
    /// project's checkpoint, a ref of the store's own, a node that never existed — is the
    /// store's [`UnknownRef`](agentbox_store::Error::UnknownRef) for `reference`, whatever
    /// the reason; a prefix matching several nodes of the scope is
    /// [`AmbiguousRef`](agentbox_store::Error::AmbiguousRef) with those nodes only.
    pub fn resolve(&self, reference: &str) -> Result<Confined> {
        let unknown = || {
            crate::BoxError::Store(agentbox_store::Error::UnknownRef {
                reference: reference.to_owned(),
            })
        };
        if reference == "HEAD" {
            return Ok(Confined::HeadRelative(reference.to_owned()));
        }
        if let Some(n) = agentbox_store::store::head_steps(reference) {
            let n = n.ok_or_else(unknown)?;
            // Checked here too (the walk stays in the history by construction): a count past
            // the root is the same error on both sides.
            let mut at = self.head.clone();
            for _ in 0..n {
                at = self
                    .parents
                    .get(&at)
                    .cloned()
                    .flatten()
                    .ok_or_else(unknown)?;
            }
            return Ok(Confined::HeadRelative(reference.to_owned()));
        }
        if let Some(id) = self.tags.get(reference) {
            return Ok(Confined::Node(id.clone()));
        }
        if reference.contains('/') {
            return self
                .refs
                .get(reference)
                .map(|id| Confined::Node(id.clone()))
                .ok_or_else(unknown);
        }
        if id::is_full_id(reference) {
            return match self.contains(reference) {
                true => Ok(Confined::Node(reference.to_owned())),
                false => Err(unknown()),
            };
        }
        if id::is_hex(reference) && reference.len() >= id::MIN_PREFIX {
            let matches: BTreeSet<&String> = self
                .parents
                .keys()
                .filter(|i| i.starts_with(reference))
                .collect();
            let mut it = matches.iter();
            return match (it.next(), it.next()) {
                (None, _) => Err(unknown()),
                (Some(one), None) => Ok(Confined::Node((*one).clone())),
                _ => Err(crate::BoxError::Store(
                    agentbox_store::Error::AmbiguousRef {
                        reference: reference.to_owned(),
                        candidates: matches.into_iter().cloned().collect(),
                    },
                )),
            };
        }
        Err(unknown())
    }
}

impl Boxes {
    /// The scope of box `name`'s relayed requests (see [`Scope`]): its history, and the
    /// refs of its own project's checkpoints among it.
    pub fn scope(&self, name: &str) -> Result<Scope> {
        let store = self.store()?;
        let history = store.history(name)?;
        let project = crate::records::record::read(self.home(), name)?.project;
        // `checkpoints/<key>/` of the box's project: another project's never qualifies.
        let prefix = format!(
            "checkpoints/{}/",
            crate::checkpoints::checkpoint::project_key(project.as_deref())
        );
        Ok(Scope::new(&history, store.refs()?, &prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentbox_core::id::NodeId;
    use agentbox_store::Node;

    fn node(id: &str, parent: Option<&str>, env: &str) -> Node {
        Node {
            id: NodeId::from_trusted(id),
            parent: parent.map(NodeId::from_trusted),
            env: env.to_owned(),
            seq: 0,
            layer: id.to_owned(),
            message: String::new(),
            command: None,
            created: chrono::Utc::now(),
            metadata: BTreeMap::new(),
            deleted: None,
            detached: None,
        }
    }

    const ROOT: &str = "aaaa000000000001";
    const MID: &str = "aaaa000000000002";
    const HEAD: &str = "bbbb000000000003";
    const OTHER: &str = "cccc000000000004";

    /// Box `b`: ROOT (a checkpoint's node, another box's) ← MID ← HEAD, tag `v1` on MID.
    fn scope() -> Scope {
        let history = History {
            env: "b".into(),
            head: NodeId::from_trusted(HEAD),
            tags: [
                ("v1".to_owned(), MID.to_owned()),
                ("stray".to_owned(), OTHER.to_owned()),
            ]
            .into(),
            nodes: vec![
                node(ROOT, None, "a"),
                node(MID, Some(ROOT), "b"),
                node(HEAD, Some(MID), "b"),
            ],
        };
        let refs = [
            ("checkpoints/pmine/golden".to_owned(), ROOT.to_owned()),
            ("checkpoints/pmine/unrelated".to_owned(), OTHER.to_owned()),
            ("checkpoints/ptheirs/same".to_owned(), ROOT.to_owned()),
        ]
        .into();
        Scope::new(&history, refs, "checkpoints/pmine/")
    }

    fn unknown(s: &Scope, r: &str) -> bool {
        matches!(
            s.resolve(r),
            Err(crate::BoxError::Store(agentbox_store::Error::UnknownRef { reference })) if reference == r
        )
    }

    #[test]
    fn own_names_resolve() {
        let s = scope();
        let node = |r: &str| s.resolve(r).expect(r);
        assert_eq!(node("HEAD"), Confined::HeadRelative("HEAD".into()));
        assert_eq!(node("HEAD~2"), Confined::HeadRelative("HEAD~2".into()));
        assert_eq!(node("HEAD^"), Confined::HeadRelative("HEAD^".into()));
        assert_eq!(node("v1"), Confined::Node(MID.into()));
        assert_eq!(node(ROOT), Confined::Node(ROOT.into()));
        assert_eq!(node("bbbb"), Confined::Node(HEAD.into()));
        assert_eq!(
            node("checkpoints/pmine/golden"),
            Confined::Node(ROOT.into())
        );
    }

    #[test]
    fn everything_else_is_an_unknown_ref() {
        let s = scope();
        for r in [
            OTHER,
            "cccc",
            "cccc0000",
            "dddd",
            "stray",
            "HEAD~3",
            "HEAD~x",
            "checkpoints/pmine/unrelated",
            "checkpoints/ptheirs/same",
            "checkpoints/pmine/../ptheirs/same",
            "abc",
            "",
        ] {
            assert!(unknown(&s, r), "{r}: {:?}", s.resolve(r));
        }
    }

    #[test]
    fn an_ambiguous_prefix_names_only_the_boxs_nodes() {
        let s = scope();
        match s.resolve("aaaa") {
            Err(crate::BoxError::Store(agentbox_store::Error::AmbiguousRef {
                candidates, ..
            })) => assert_eq!(candidates, vec![ROOT.to_owned(), MID.to_owned()]),
            other => panic!("{other:?}"),
        }
    }
}
