//! Re-seeding a box booted from a checkpoint: its repository has the checkpoint's commits
//! already, so only what it lacks travels — a bundle of `from_tip..base` and the
//! carried-over work.

use std::path::Path;

use super::pack::TarOut;
use super::{add_lfs, lfs, staged, Form, Made, ShipOpts, Shipment};
use crate::run::git;
use crate::{is_object_id, HostRepo, Result};

/// Make, in `opts.stage`, a shipment for box `name` whose repository (a checkpoint's) has
/// commit `from_tip` and its history: a bundle of what the base and the carried-over work
/// add to `from_tip`, the LFS objects they add, and the untracked files (see
/// [`Shipment::steps`]). `Ok(None)` when `from_tip` cannot serve — not a commit the host
/// has, or not an ancestor of the base (the checkpoint diverged): the caller ships the whole
/// repository with [`super::ship`] instead, as it does when the box's fetch of the bundle
/// fails (a shallow checkpoint lacking a commit the bundle builds on). On success the host
/// has the box's pins and branch; on failure nothing.
pub fn ship_delta(
    repo: &HostRepo,
    name: &str,
    from_tip: &str,
    opts: &ShipOpts,
) -> Result<Option<Shipment>> {
    if !crate::has_commit(&repo.root, from_tip) {
        return Ok(None);
    }
    let base = match crate::seed::resolve_start(repo, &opts.seed) {
        Ok(start) => start.base,
        Err(e) => return Err(e),
    };
    if git(
        &repo.root,
        &["merge-base", "--is-ancestor", from_tip, &base],
    )
    .is_err()
    {
        return Ok(None);
    }
    debug_assert!(is_object_id(from_tip));
    staged(repo, name, opts, |job| {
        let mut tips = vec![];
        if job.base != from_tip {
            tips.push(job.temp_ref("base"));
        }
        if job.stash.is_some() {
            tips.push(job.temp_ref("carried"));
        }
        let bundle = job.opts.stage.join("delta.bundle");
        if !tips.is_empty() {
            let path = bundle
                .to_str()
                .ok_or_else(|| job.fail("make the bundle", "the stage path is not UTF-8"))?;
            let not = format!("^{from_tip}");
            let mut args = vec!["bundle", "create", "-q", path];
            args.extend(tips.iter().map(String::as_str));
            args.push(&not);
            job.git(&job.repo.root, "make the bundle", &args)?;
        }
        let lfs = lfs::objects(job.repo, &job.checkouts(), &[from_tip]);
        let git_tar = job.opts.stage.join("git.tar");
        let bytes = (|| {
            let mut tar = TarOut::create(&git_tar, job.opts.owner)?;
            if !tips.is_empty() {
                tar.add(&bundle, Path::new(super::DELTA_BUNDLE))?;
            }
            add_lfs(&mut tar, &lfs, &job.opts.stage)?;
            tar.finish()
        })()
        .map_err(|e| job.fail("pack the bundle", e))?;
        if bundle.exists() {
            fs_err::remove_file(&bundle).map_err(|e| job.fail("clear the stage", e))?;
        }
        Ok(Made {
            form: Form::Delta {
                from_tip: from_tip.to_owned(),
                bundle: !tips.is_empty(),
            },
            git_tar,
            git_tar_bytes: bytes,
            lfs,
        })
    })
    .map(Some)
}
