//! What the merge of a checkpoint's `/workspace` with a fresh one does, computed from the
//! two trees' listings (data read from the box, see [`crate::container_fs`]); the same
//! rules as the local provider's in-box merge (`agentbox_boxes::lifecycle::reseed`):
//!
//! * of the checkpoint's workspace, what its git does not track stays (the warm state:
//!   ignored and untracked files) and everything else goes ([`removals`]);
//! * each fresh entry then moves in: whole where the workspace lacks it, entry by entry
//!   where both have a directory; where the workspace has something else at its path, the
//!   fresh one replaces it unless the host's carried-over work brought a path at or below
//!   it — then the box's stays, a conflict unless both hold the same file ([`merge`]);
//! * a path the host's work deleted that the checkpoint keeps is the box's, and a conflict.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::container_fs::{Kind, Listing};

/// The entries of `l` by their parent (`""` for those at the top).
fn children(l: &Listing) -> BTreeMap<PathBuf, Vec<PathBuf>> {
    let mut out: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for p in l.keys() {
        let parent = p.parent().map(Path::to_path_buf).unwrap_or_default();
        out.entry(parent).or_default().push(p.clone());
    }
    out
}

/// What goes of the checkpoint's workspace `ws`: every entry that is not `kept`, below a
/// kept one, a sub-repository (`subs`) or a directory on the way to one of those; only the
/// outermost such entries.
pub(crate) fn removals(
    ws: &Listing,
    kept: &BTreeSet<PathBuf>,
    subs: &BTreeSet<PathBuf>,
) -> Vec<PathBuf> {
    let kids = children(ws);
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for r in kids.get(&rel).into_iter().flatten() {
            if kept.contains(r) {
                continue;
            }
            let leads = subs.contains(r) || kept.iter().chain(subs).any(|k| k.starts_with(r));
            if ws.get(r) == Some(&Kind::Dir) && leads {
                todo.push(r.clone());
            } else {
                out.push(r.clone());
            }
        }
    }
    out.sort();
    out
}

/// `ws` without `removed` and what is below them.
pub(crate) fn without(ws: &Listing, removed: &[PathBuf]) -> Listing {
    let gone: BTreeSet<&Path> = removed.iter().map(PathBuf::as_path).collect();
    ws.iter()
        .filter(|(p, _)| !p.ancestors().any(|a| gone.contains(a)))
        .map(|(p, k)| (p.clone(), *k))
        .collect()
}

/// What the merge of `fresh` into what is left of the workspace (`ws`) does.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Merge {
    /// Fresh entries moved into the workspace, replacing what is at their path.
    pub moves: Vec<PathBuf>,
    /// Paths both have where the box's stays: a conflict unless both hold the same file.
    pub kept_by_box: Vec<PathBuf>,
    /// Paths the host's work deleted that the workspace keeps: conflicts.
    pub deleted_by_host: Vec<PathBuf>,
}

/// See the module's documentation; `carried` are the paths the host's work brought
/// (relative to the workspace).
pub(crate) fn merge(fresh: &Listing, ws: &Listing, carried: &BTreeSet<PathBuf>) -> Merge {
    let kids = children(fresh);
    let mut out = Merge::default();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for r in kids.get(&rel).into_iter().flatten() {
            match ws.get(r) {
                None => out.moves.push(r.clone()),
                Some(Kind::Dir) if fresh.get(r) == Some(&Kind::Dir) => todo.push(r.clone()),
                Some(_) => {
                    if carried.iter().any(|c| c.starts_with(r)) {
                        out.kept_by_box.push(r.clone());
                    } else {
                        out.moves.push(r.clone());
                    }
                }
            }
        }
    }
    out.deleted_by_host = carried
        .iter()
        .filter(|c| !fresh.contains_key(*c) && ws.contains_key(*c))
        .cloned()
        .collect();
    out.moves.sort();
    out.kept_by_box.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(entries: &[(&str, Kind)]) -> Listing {
        entries
            .iter()
            .map(|(p, k)| (PathBuf::from(p), *k))
            .collect()
    }

    fn set(paths: &[&str]) -> BTreeSet<PathBuf> {
        paths.iter().map(PathBuf::from).collect()
    }

    fn strings(v: &[PathBuf]) -> Vec<String> {
        v.iter().map(|p| p.display().to_string()).collect()
    }

    /// The local merge's case (`ignored_files_stay_tracked_files_are_fresh_…`): ignored
    /// files stay, tracked files are the fresh ones, the checkpoint's own tracked files go,
    /// and a carried-over path the checkpoint also holds keeps the box's version.
    #[test]
    fn the_warm_state_stays_tracked_files_are_fresh_the_box_wins_on_carried_paths() {
        use Kind::{Dir, File};
        let ws = listing(&[
            (".git", Dir),
            (".git/HEAD", File),
            (".gitignore", File),
            ("src.txt", File),
            ("old-only.txt", File),
            ("node_modules", Dir),
            ("node_modules/dep", Dir),
            ("node_modules/dep/index.js", File),
            ("build.out", File),
            ("gen", Dir),
            ("gen/deep", Dir),
            ("gen/deep/out.txt", File),
            ("gen/tracked.txt", File),
        ]);
        let kept = set(&["node_modules", "build.out", "gen/deep/out.txt"]);
        let removed = removals(&ws, &kept, &BTreeSet::new());
        assert_eq!(
            strings(&removed),
            [
                ".git",
                ".gitignore",
                "gen/tracked.txt",
                "old-only.txt",
                "src.txt"
            ]
        );
        let left = without(&ws, &removed);
        assert!(!left.contains_key(Path::new(".git/HEAD")));
        assert!(left.contains_key(Path::new("gen/deep/out.txt")));
        let fresh = listing(&[
            (".git", Dir),
            (".git/HEAD", File),
            (".gitignore", File),
            ("src.txt", File),
            ("build.out", File),
            ("gen", Dir),
            ("gen/deep", Dir),
            ("gen/deep/new.txt", File),
            ("new.txt", File),
        ]);
        let carried = set(&["build.out", "new.txt", "dropped.txt"]);
        let m = merge(&fresh, &left, &carried);
        assert_eq!(
            strings(&m.moves),
            [
                ".git",
                ".gitignore",
                "gen/deep/new.txt",
                "new.txt",
                "src.txt"
            ]
        );
        assert_eq!(strings(&m.kept_by_box), ["build.out"]);
        assert!(m.deleted_by_host.is_empty());
        // A path the host deleted that the checkpoint keeps is the box's.
        let left = listing(&[("dropped.txt", File)]);
        let m = merge(&listing(&[]), &left, &carried);
        assert_eq!(strings(&m.deleted_by_host), ["dropped.txt"]);
    }

    /// A root that is no repository: its top-level files are kept by the caller, and a
    /// sub-repository keeps its untracked files only.
    #[test]
    fn a_sub_repository_is_walked_into_and_only_its_untracked_files_stay() {
        use Kind::{Dir, File};
        let ws = listing(&[
            ("notes.txt", File),
            ("api", Dir),
            ("api/lib.rs", File),
            ("api/out.log", File),
            ("api/.git", Dir),
        ]);
        let kept = set(&["notes.txt", "api/out.log"]);
        let removed = removals(&ws, &kept, &set(&["api"]));
        assert_eq!(strings(&removed), ["api/.git", "api/lib.rs"]);
        // A directory the box has where the fresh tree has a file: the fresh file wins
        // when the host's work did not bring it.
        let m = merge(
            &listing(&[("x", File)]),
            &listing(&[("x", Dir), ("x/y", File)]),
            &BTreeSet::new(),
        );
        assert_eq!(strings(&m.moves), ["x"]);
    }
}
