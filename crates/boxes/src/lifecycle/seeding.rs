//! A box's workspace made from a project directory, repositories included.
//!
//! A project's repositories are its root, when that is the top of a repository, and every
//! first-level sub-directory that is the top of one (a monorepo of separate repositories;
//! the root itself may be a plain directory). Each gets a repository of its own in the box
//! (`/workspace`, `/workspace/<sub>`), made by [`agentbox_git::seed`]:
//!
//! * branch `agentbox/<box>` for the root, `agentbox/<box>--<sub>` for a sub-repository,
//!   each bumped to `-2`, `-3`, … on its own when taken in its host repository;
//! * a base pin `refs/agentbox/<box>/base` in each host repository;
//! * the host's uncommitted and untracked work of each carried over;
//! * objects borrowed from each host repository at [`record::box_objects`], which the
//!   supervisor binds read-only.
//!
//! Without a repository at the root, its other files are copied as they are, except the
//! sub-repositories' directories. A sub-repository's files never come through the root's
//! copy (its untracked files are not the root's), and no host `.git` is copied: each box
//! repository is made fresh.

use std::path::Path;

use agentbox_core::home::Home;

use agentbox_git::{GitError, HostRepo, SeedOpts};
use agentbox_store::fsops::copy::{copy_tree, CopyOpts};
use agentbox_store::fsops::scan::scan_tree;

use crate::records::record::{self, GitRecord};

pub use crate::records::record::SeededRepo;

/// Fill `ws` (not existing yet) from the project directory `src` for box `name`: its
/// repositories seeded (see the module documentation), the rest copied. With `use_git`
/// false, or when the project holds no repository, it is a plain copy and the list is
/// empty. On failure, the pins this made in host repositories are removed again.
pub fn seed_workspace(
    home: &Home,
    src: &Path,
    name: &str,
    ws: &Path,
    opts: &SeedOpts,
    use_git: bool,
) -> Result<Vec<SeededRepo>, GitError> {
    let (root, subs) = if use_git {
        (agentbox_git::detect(src)?, agentbox_git::sub_repos(src)?)
    } else {
        (None, Vec::new())
    };
    if root.is_none() && subs.is_empty() {
        agentbox_store::fsops::copy::copy_dir(src, ws, &CopyOpts::default())?;
        return Ok(Vec::new());
    }
    // Every branch is chosen before anything is written, so a name no repository accepts
    // fails before any host repository has been touched.
    let mut plan: Vec<(Option<String>, HostRepo, String)> = Vec::new();
    if let Some(repo) = root {
        let branch = agentbox_git::pick_branch(&repo, name)?;
        plan.push((None, repo, branch));
    }
    for (sub, repo) in subs {
        let branch = agentbox_git::pick_branch(&repo, &format!("{name}--{sub}"))?;
        plan.push((Some(sub), repo, branch));
    }
    // The home's ledger names the repositories before any ref is written in them, so a
    // crash from here on leaves refs `prune` knows to remove.
    let repos: Vec<&Path> = plan.iter().map(|(_, r, _)| r.root.as_path()).collect();
    crate::records::registry::note_pins(home, name, &repos)
        .map_err(|e| GitError::Io(std::io::Error::other(e.to_string())))?;
    let result = seed_all(src, name, ws, opts, &plan);
    if result.is_err() {
        for (_, repo, _) in &plan {
            // The pins go; a branch already made is harmless (it points at a commit the
            // host has) and stays.
            let _ = agentbox_git::unpin(&repo.root, name);
        }
    }
    result
}

fn seed_all(
    src: &Path,
    name: &str,
    ws: &Path,
    opts: &SeedOpts,
    plan: &[(Option<String>, HostRepo, String)],
) -> Result<Vec<SeededRepo>, GitError> {
    let subs: Vec<String> = plan.iter().filter_map(|(s, _, _)| s.clone()).collect();
    if plan.first().is_some_and(|(sub, _, _)| sub.is_some()) {
        copy_without(src, ws, &subs)?;
    }
    let mut out = Vec::new();
    for (sub, repo, branch) in plan {
        let box_objects = record::box_objects(sub.as_deref());
        let (dst, opts) = match sub {
            None => (
                ws.to_owned(),
                SeedOpts {
                    exclude: subs.clone(),
                    ..opts.clone()
                },
            ),
            Some(s) => (ws.join(s), opts.clone()),
        };
        let seeded = agentbox_git::seed(repo, name, branch, &dst, &box_objects, &opts)?;
        out.push(SeededRepo {
            record: GitRecord {
                sub: sub.clone(),
                repo: repo.root.clone(),
                objects: repo.objects.clone(),
                box_objects,
                branch: seeded.branch.clone(),
                base: seeded.base.clone(),
                source_branch: seeded.source_branch.clone(),
            },
            seeded,
        });
    }
    Ok(out)
}

/// Copy `src` to `dst` as it is, leaving out the first-level entries named in `skip`.
fn copy_without(src: &Path, dst: &Path, skip: &[String]) -> Result<(), GitError> {
    let mut tree = scan_tree(src)?;
    tree.entries.retain(|rel, _| {
        let first = rel.components().next();
        !first.is_some_and(|c| skip.iter().any(|s| c.as_os_str() == s.as_str()))
    });
    copy_tree(&tree, dst, &CopyOpts::default())?;
    Ok(())
}
