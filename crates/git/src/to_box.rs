//! Host commits for a box that cannot borrow the host's objects (a box on a Docker
//! engine): a bundle the host makes of them, from its own repository, for the box to fetch.

use std::path::Path;

use crate::from_box::{has_commit, is_object_id};
use crate::run::git;
use crate::{GitError, Result};

/// Write to `out` a bundle of the host repository at `repo_root` holding `reference` (a
/// full ref name, e.g. `refs/agentbox/<box>/fetched`) with the commits it reaches that
/// none of `known` does (commits the box has: its base, the tips the host took from it).
/// An id of `known` the host lacks is passed over. Only host data is read.
pub fn bundle_for_box(repo_root: &Path, reference: &str, known: &[&str], out: &Path) -> Result<()> {
    let refused = |message: String| GitError::Command {
        dir: repo_root.to_owned(),
        args: format!("bundle create {reference}"),
        message,
    };
    let out = out
        .to_str()
        .ok_or_else(|| refused(format!("{} is not UTF-8", out.display())))?;
    let mut args = vec!["bundle", "create", "--quiet", out, reference];
    let nots: Vec<String> = known
        .iter()
        .filter(|k| is_object_id(k) && has_commit(repo_root, k))
        .map(|k| format!("^{k}"))
        .collect();
    args.extend(nots.iter().map(String::as_str));
    git(repo_root, &args).map(|_| ())
}
