//! `agentbox cp` and `agentbox download`: files in and out of a box, through the façade's
//! copy (see `agentbox_boxes::lifecycle::copy`). Names the box sent (skipped entries) are
//! box-controlled: escaped when printed.

use std::path::PathBuf;

use agentbox_boxes::lifecycle::copy::{Copied, CopyOptions, Take, DEFAULT_MAX_BYTES};

use super::ctx::Ctx;
use crate::args::{parse_size, CpArgs, DownloadArgs};
use crate::errors::{CliError, CliResult};

/// `BOX:PATH` as (box, path), when its prefix names a box (a name without `/`).
fn split(ctx: &Ctx, arg: &str) -> CliResult<Option<(String, String)>> {
    match arg.split_once(':') {
        Some((b, p)) if !b.is_empty() && !b.contains('/') => {
            let rec = ctx.find_box(b)?.ok_or_else(|| {
                CliError::usage(
                    format!("no box named {b:?} (in {arg:?})"),
                    "`agentbox list` shows the boxes; write ./NAME for a host path with a colon",
                )
            })?;
            Ok(Some((rec.name.into_string(), p.to_owned())))
        }
        _ => Ok(None),
    }
}

fn options(exclude: Vec<String>, max: Option<&str>) -> CliResult<CopyOptions> {
    Ok(CopyOptions {
        exclude,
        max_bytes: match max {
            Some(s) => parse_size(s)?,
            None => DEFAULT_MAX_BYTES,
        },
    })
}

fn report(ctx: &Ctx, done: &Copied, dest: &str) -> CliResult {
    ctx.out(done, || {
        let mut s = format!(
            "copied {} files, {} directories ({} bytes) to {}",
            done.files,
            done.dirs,
            done.bytes,
            crate::render::text(dest)
        );
        if let Some(n) = &done.node {
            s.push_str(&format!(" (node {})", &n[..n.len().min(12)]));
        }
        s.push('\n');
        if done.changed_while_read {
            s.push_str("note: the box changed files while they were read\n");
        }
        for k in &done.skipped {
            s.push_str(&format!(
                "skipped {} {} (not made on the host)\n",
                k.kind,
                crate::render::text(&k.path)
            ));
        }
        s
    })
}

pub(super) fn cp(ctx: &Ctx, a: CpArgs) -> CliResult {
    let opts = options(a.exclude, a.max_size.as_deref())?;
    let (dst, srcs) = a.paths.split_last().ok_or_else(|| {
        CliError::usage(
            "cp needs a source and a destination",
            "agentbox cp BOX:SRC DST",
        )
    })?;
    let dst_box = split(ctx, dst)?;
    let src_boxes = srcs
        .iter()
        .map(|s| split(ctx, s))
        .collect::<CliResult<Vec<_>>>()?;
    match dst_box {
        Some((name, path)) => {
            if src_boxes.iter().any(Option::is_some) {
                return Err(CliError::usage(
                    "cp copies between a box and the host, not from box to box",
                    "copy out to a host directory first, then in",
                ));
            }
            let srcs: Vec<PathBuf> = srcs.iter().map(PathBuf::from).collect();
            let done = ctx.boxes().copy_in(&name, &srcs, &path, &opts)?;
            report(ctx, &done, dst)
        }
        None => {
            let mut name = None;
            let mut paths = Vec::new();
            for (s, b) in srcs.iter().zip(src_boxes) {
                let Some((n, p)) = b else {
                    return Err(CliError::usage(
                        format!("{s:?} is a host path, and so is the destination"),
                        "one side is a box: BOX:PATH (`agentbox list` shows the boxes)",
                    ));
                };
                if name.as_ref().is_some_and(|m| *m != n) {
                    return Err(CliError::usage(
                        "the sources are in different boxes",
                        "copy from one box at a time",
                    ));
                }
                name = Some(n);
                paths.push(p);
            }
            let name = name.unwrap_or_default();
            let done = ctx
                .boxes()
                .copy_out(&name, &paths, std::path::Path::new(dst), &opts)?;
            report(ctx, &done, dst)
        }
    }
}

pub(super) fn download(ctx: &Ctx, a: DownloadArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let to = a.to.unwrap_or_else(|| PathBuf::from(rec.name.as_str()));
    let take = if a.all {
        Take::All
    } else if a.with_env {
        Take::TrackedAndEnv
    } else {
        Take::Tracked
    };
    let opts = options(Vec::new(), a.max_size.as_deref())?;
    let done = ctx.boxes().download(rec.name.as_str(), &to, take, &opts)?;
    report(ctx, &done, &to.display().to_string())
}
