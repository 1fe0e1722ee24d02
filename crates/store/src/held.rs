//! Environments whose trees a provider holds outside the store.
//!
//! A Docker box's working tree is its container's writable layer and each of its nodes is
//! an image on the box's engine: no byte of it is on the host. The store still keeps its
//! history — nodes, HEAD, tips, tags, refs, retention — so that `log`, tags, retention and
//! GC treat it as they treat every other environment. Such an environment is *held*
//! ([`crate::EnvState::held_by`] names the provider) and so is every layer of its nodes
//! ([`crate::backend::LayerRecord::held`] names the provider and its object, an image id).
//!
//! Invariants:
//! * the store never reads, writes, mounts or copies a held tree: every operation on a
//!   tree (checkout's reset, diff, show's changes, export, derive) refuses a held node
//!   with [`crate::Error::Held`], and the provider that holds it does that work;
//! * a held environment's HEAD moves only through [`Store::commit_held`] and
//!   [`Store::checkout_held`], under the environment's lock, as a commit or checkout does;
//! * freeing a held layer (GC, `fsck --repair`, `prune`) never loses its object: the object
//!   is first queued, durably, in `store/released/<provider>/<blake3 of the object>` (the
//!   file holds the object), then the layer record goes. The provider removes the object
//!   from wherever it lives and then the queue entry ([`Store::released`],
//!   [`Store::forget_released`]); a crash in between leaves the entry, and the next drain
//!   removes an object already gone without complaint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use agentbox_core::atomic::{self, write_json_unsynced};
use agentbox_core::id::{new_id, NodeId};
use agentbox_core::lock::{FileLock, Mode};
use chrono::Utc;
use serde::{Deserialize, Serialize};

use crate::backend::LayerRecord;
use crate::node::Node;
use crate::{CommitOpts, EnvState, Error, Result, Store};

/// Who holds a layer's data, and under which name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The provider (as box records name it: `docker`).
    pub by: String,
    /// Its name for the data (a Docker image id, `sha256:…`). Opaque to the store.
    pub object: String,
}

impl Held {
    /// Refuse a provider name that cannot be a directory name of the release queue.
    fn check(&self) -> Result<()> {
        let ok = !self.by.is_empty()
            && self.by.len() <= 32
            && self
                .by
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok || self.object.is_empty() || self.object.len() > 1024 {
            return Err(Error::InvalidName {
                name: format!("{}:{}", self.by, self.object),
                reason: "a held layer names its provider in lowercase letters, digits and \
                         '-', and a non-empty object of at most 1024 bytes"
                    .to_owned(),
            });
        }
        Ok(())
    }
}

impl Store {
    /// Create environment `name`, held by `held.by`, whose first node's tree is `held`.
    pub fn create_held_env(&self, name: &str, held: Held, message: &str) -> Result<EnvState> {
        held.check()?;
        self.check_new_env_name(name)?;
        let _store = self.lock_store(Mode::Shared, "create")?;
        let env_dir = self.claim_env_dir(name)?;
        let result = (|| {
            let _lock = FileLock::acquire(
                &self.layout().env_lock(name),
                Mode::TryExclusive,
                &format!("environment {name:?}"),
                "create",
            )?;
            let by = held.by.clone();
            let opts = CommitOpts {
                message: message.to_owned(),
                command: None,
                metadata: BTreeMap::new(),
            };
            let (node, durable) = self.stage_held_node(name, None, 0, held, opts)?;
            self.backend().make_durable(&durable)?;
            let state = EnvState {
                name: name.to_owned(),
                created: node.created,
                mountpoint: None,
                head: node.id.clone(),
                next_seq: 1,
                tips: BTreeSet::from([node.id.as_str().to_owned()]),
                tags: BTreeMap::new(),
                checkout_pending: None,
                box_base: None,
                disk_limit: None,
                held_by: Some(by),
            };
            self.write_env(&state)?;
            Ok(state)
        })();
        if result.is_err() {
            // The node was never acknowledged (no env.json names it): reconcile and GC
            // remove it; the environment's directory goes now.
            let _ = fs_err::remove_dir_all(&env_dir);
        }
        result
    }

    /// Record a node of held environment `env` whose tree is `held`, as a child of HEAD,
    /// and move HEAD to it (the commit point, as [`Store::commit`]).
    pub fn commit_held(&self, env: &str, held: Held, opts: CommitOpts) -> Result<Node> {
        held.check()?;
        let _guard = self.lock_env(env, "commit")?;
        let mut state = self.env(env)?;
        self.check_held_by(&state, &held.by)?;
        let head = self.node(&state.head)?;
        let (node, durable) = self.stage_held_node(env, Some(&head), state.next_seq, held, opts)?;
        self.backend().make_durable(&durable)?;
        self.move_head(&mut state, &head, &node)?;
        Ok(node)
    }

    /// Move held environment `env`'s HEAD to `reference` (resolved in its history, under its
    /// lock) and give the node with what holds its tree: the provider makes the working
    /// tree that node's before or after this, as its own crash recovery requires.
    pub fn checkout_held(&self, env: &str, reference: &str, by: &str) -> Result<(Node, Held)> {
        let _g = self.lock_env(env, "checkout")?;
        let mut state = self.env(env)?;
        self.check_held_by(&state, by)?;
        let node = self.node(&self.resolve_in(&state, reference)?)?;
        let held = self.held_of(&node)?.ok_or_else(|| not_held(&node, by))?;
        if held.by != by {
            return Err(not_held(&node, by));
        }
        state.head = node.id.clone();
        state.checkout_pending = None;
        self.write_env(&state)?;
        Ok((node, held))
    }

    /// A detached node of held environment `env` whose tree is `held`: what its provider
    /// made of node `from` (resolved in `env`) as `how` says — a checkpoint's capture —,
    /// kept as ref [`crate::DetachOpts::keep_as`] (the commit point, as for
    /// [`Store::derive`]). `env` is only read.
    pub fn detach_held(
        &self,
        env: &str,
        from: &str,
        held: Held,
        how: crate::node::DetachedHow,
        opts: crate::DetachOpts,
    ) -> Result<Node> {
        held.check()?;
        let ref_path = self.ref_path(&opts.keep_as)?;
        let _store = self.lock_store(Mode::Shared, "detach")?;
        let state = self.env(env)?;
        self.check_held_by(&state, &held.by)?;
        let source = self.node(&self.resolve_in(&state, from)?)?;
        let id = new_id();
        let mut record = LayerRecord::new(&id, None, 1);
        record.held = Some(held);
        write_json_unsynced(&self.layout().layer_record(&id), &record)?;
        self.finish_detached(
            "detach-held",
            env,
            &source,
            how,
            id,
            Some(record),
            &ref_path,
            opts,
        )
    }

    /// Who holds node `node`'s tree (`None`: the store's backend does).
    pub fn held_of(&self, node: &Node) -> Result<Option<Held>> {
        Ok(
            atomic::read_json_opt::<LayerRecord>(&self.layout().layer_record(&node.layer))?
                .and_then(|r| r.held),
        )
    }

    /// The objects GC freed that `by` has not removed yet, each with its queue entry.
    pub fn released(&self, by: &str) -> Result<Vec<(String, PathBuf)>> {
        let dir = self.layout().released(by);
        let mut out = Vec::new();
        let entries = match fs_err::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in entries {
            let path = entry?.path();
            let object = fs_err::read_to_string(&path)?;
            out.push((object, path));
        }
        out.sort();
        Ok(out)
    }

    /// Drop queue entry `entry` (from [`Store::released`]) once its object is gone.
    pub fn forget_released(&self, entry: &std::path::Path) -> Result<()> {
        match fs_err::remove_file(entry) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Free layer `lid` (its record and its data), whoever holds the data: the backend's
    /// directory is removed, a held object is queued for its provider first. The record
    /// goes before the directory: a layer without record is garbage on every later pass.
    pub(crate) fn free_layer(&self, lid: &str) -> Result<()> {
        let rec_path = self.layout().layer_record(lid);
        let record = atomic::read_json_opt::<LayerRecord>(&rec_path)?;
        if let Some(held) = record.and_then(|r| r.held) {
            self.queue_release(&held)?;
        }
        if rec_path.exists() {
            fs_err::remove_file(&rec_path)?;
        }
        agentbox_core::failpoint::hit("gc:after-record");
        self.backend().remove_layer(lid)
    }

    fn queue_release(&self, held: &Held) -> Result<()> {
        held.check()?;
        let dir = self.layout().released(&held.by);
        fs_err::create_dir_all(&dir)?;
        let name = blake3::hash(held.object.as_bytes()).to_hex().to_string();
        atomic::write_atomic(&dir.join(name), held.object.as_bytes())?;
        Ok(())
    }

    fn check_held_by(&self, state: &EnvState, by: &str) -> Result<()> {
        if state.held_by.as_deref() == Some(by) {
            return Ok(());
        }
        Err(Error::Refused {
            action: "record a node of",
            id: state.name.clone(),
            reason: match &state.held_by {
                Some(other) => format!("the environment is held by the {other} provider"),
                None => "its tree is in the store, not held by a provider".to_owned(),
            },
        })
    }

    /// Write the layer record and the node of a held tree (none durable yet).
    fn stage_held_node(
        &self,
        env: &str,
        parent: Option<&Node>,
        seq: u64,
        held: Held,
        opts: CommitOpts,
    ) -> Result<(Node, Vec<PathBuf>)> {
        let id = new_id();
        let mut record = LayerRecord::new(&id, None, 1);
        record.held = Some(held);
        write_json_unsynced(&self.layout().layer_record(&id), &record)?;
        let node = Node {
            id: NodeId::from_trusted(id.as_str()),
            parent: parent.map(|p| p.id.clone()),
            env: env.to_owned(),
            seq,
            layer: id.clone(),
            message: opts.message,
            command: opts.command,
            created: Utc::now(),
            metadata: opts.metadata,
            deleted: None,
            detached: None,
        };
        let entry = self.index_id(&node.id)?;
        write_json_unsynced(&self.layout().node(&node.id), &node)?;
        let mut files = vec![
            self.layout().layer_record(&id),
            self.layout().node(&node.id),
        ];
        files.extend(entry);
        Ok((node, files))
    }
}

fn not_held(node: &Node, by: &str) -> Error {
    Error::Refused {
        action: "check out",
        id: node.id.as_str().to_owned(),
        reason: format!("its tree is not held by the {by} provider"),
    }
}
