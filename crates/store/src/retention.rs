//! Retention: thin an environment's history so it stays about `keep + log2(total)` nodes.
//!
//! Always kept: every root, the HEAD of every environment, leaves (branch tips), branch
//! points, every node a tag or store ref (checkpoint) names, and the newest `keep` nodes of
//! the environment (by sequence number). The older tail is thinned by *stable* positions:
//! with `N` the newest sequence number and `d = N - seq` a node's distance, a node survives
//! when `seq` is a multiple of `2^floor(log2(d))`. Each power-of-two band of distances then
//! keeps about one node, and because the rule depends only on `seq` and `N`:
//! * running it twice changes nothing (idempotent);
//! * running it after every commit keeps exactly what one run at the end keeps (a node that
//!   survives at `N + 1` survived at `N`), so it never collapses into a sliding window.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::store::Store;
use crate::Result;

/// What a retention pass did.
#[derive(Debug, Clone, Serialize)]
pub struct RetainReport {
    pub env: String,
    pub kept: usize,
    pub dropped: Vec<String>,
}

/// Whether a non-protected node at sequence `seq` survives when the newest is `newest`.
pub fn survives(seq: u64, newest: u64, keep: u64) -> bool {
    let d = newest.saturating_sub(seq);
    if d < keep.max(1) {
        return true;
    }
    let level = 63 - d.leading_zeros();
    seq.is_multiple_of(1u64 << level)
}

impl Store {
    /// Thin the history of `env`, keeping the newest `keep` nodes (see module docs).
    pub fn retain(&self, env: &str, keep: u64) -> Result<RetainReport> {
        let (_store, _env) = self.lock_env_exclusive(env, "retain")?;
        let nodes = self.nodes()?;
        let mut protected: BTreeSet<String> = BTreeSet::new();
        let mut children: BTreeMap<&str, usize> = BTreeMap::new();
        for n in nodes.values() {
            match &n.parent {
                Some(p) => *children.entry(p.as_str()).or_default() += 1,
                None => {
                    protected.insert(n.id.as_str().to_owned());
                }
            }
        }
        for n in nodes.values() {
            let c = children.get(n.id.as_str()).copied().unwrap_or(0);
            if c != 1 {
                // Leaves (0 children) and branch points (2+).
                protected.insert(n.id.as_str().to_owned());
            }
        }
        for e in self.envs()? {
            protected.insert(e.head.into_string());
            protected.extend(e.tags.values().cloned());
        }
        protected.extend(self.refs()?.into_values());

        // Detached nodes are no part of the history (and are named by refs anyway).
        let mine: Vec<&crate::node::Node> =
            nodes.values().filter(|n| n.in_history_of(env)).collect();
        let newest = mine.iter().map(|n| n.seq).max().unwrap_or(0);
        let dropped: Vec<String> = mine
            .iter()
            .filter(|n| !protected.contains(n.id.as_str()) && !survives(n.seq, newest, keep))
            .map(|n| n.id.as_str().to_owned())
            .collect();
        self.remove_nodes_locked(&nodes, &dropped)?;
        Ok(RetainReport {
            env: env.to_owned(),
            kept: mine.len() - dropped.len(),
            dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::survives;

    /// Simulate retention after every one of 1000 commits of a linear history.
    #[test]
    fn thinning_is_stable_and_logarithmic() {
        let keep = 10;
        let mut alive: Vec<u64> = Vec::new();
        for n in 1..=1000u64 {
            alive.push(n);
            // seq 1 stands in for the root (always protected); n is HEAD.
            alive.retain(|&s| s == 1 || s == n || survives(s, n, keep));
        }
        let once: Vec<u64> = (1..=1000u64)
            .filter(|&s| s == 1 || s == 1000 || survives(s, 1000, keep))
            .collect();
        assert_eq!(
            alive, once,
            "running after every commit equals running once"
        );
        assert!(
            alive.len() <= (keep as usize) + 12,
            "about keep + log2(1000) remain, got {}: {alive:?}",
            alive.len()
        );
        let again: Vec<u64> = alive
            .iter()
            .copied()
            .filter(|&s| s == 1 || s == 1000 || survives(s, 1000, keep))
            .collect();
        assert_eq!(again, alive, "idempotent");
        // The newest `keep` are all there.
        assert!((991..=1000).all(|s| alive.contains(&s)));
    }
}
