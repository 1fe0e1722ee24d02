//! The git-LFS objects a shipped box needs: those of the trees it checks out that the host
//! holds in its LFS store. Best effort: without `git lfs` on the host nothing is shipped,
//! and an object the host lacks stays a pointer in the box.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::run::git;
use crate::HostRepo;

/// LFS objects found for a shipment: `(oid, the host's file)`, and how many were wanted
/// but are not in the host's store.
#[derive(Debug, Default)]
pub(crate) struct LfsObjects {
    pub found: Vec<(String, PathBuf)>,
    pub missing: usize,
}

/// The LFS objects of the commits `want` that `not` do not have already (their trees'
/// pointers, by oid), found in the host repository's LFS store.
///
/// Nothing is looked up when the host's store is empty (no object to ship whatever the trees
/// point to; `git lfs ls-files` costs about 0.2 s on 2,000 files) or git-lfs is not installed.
pub(crate) fn objects(repo: &HostRepo, want: &[&str], not: &[&str]) -> LfsObjects {
    let store = repo.git_dir().join("lfs/objects");
    let stored = fs_err::read_dir(&store)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    // Not installed (or not working): nothing to ship, pointers stay pointers.
    if !stored || git(&repo.root, &["lfs", "version"]).is_err() {
        return LfsObjects::default();
    }
    let oids = |commits: &[&str]| -> BTreeSet<String> {
        commits
            .iter()
            .filter_map(|c| git(&repo.root, &["lfs", "ls-files", "--long", c]).ok())
            .flat_map(|out| {
                out.lines()
                    .filter_map(|l| l.split_whitespace().next())
                    .filter(|oid| is_oid(oid))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let have = oids(not);
    let mut out = LfsObjects::default();
    for oid in oids(want).difference(&have) {
        let path = store.join(&oid[0..2]).join(&oid[2..4]).join(oid);
        if path.is_file() {
            out.found.push((oid.clone(), path));
        } else {
            out.missing += 1;
        }
    }
    out
}

/// Where object `oid` lies inside a `.git`: `lfs/objects/aa/bb/<oid>`.
pub(crate) fn rel_path(oid: &str) -> PathBuf {
    Path::new("lfs/objects")
        .join(&oid[0..2])
        .join(&oid[2..4])
        .join(oid)
}

/// An LFS oid: 64 lowercase hex digits (SHA-256).
fn is_oid(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
