//! Commands on environments and the store: setup, env, list, mount, destroy, export,
//! import, fsck.

use super::*;

pub(super) fn parse_backend(s: Option<&str>) -> CliResult<Option<BackendKind>> {
    s.map(|s| {
        s.parse::<BackendKind>()
            .map_err(|e| CliError::usage(e, "use --backend btrfs or --backend layers"))
    })
    .transpose()
}

pub(super) fn setup(ctx: &Ctx, a: crate::args::SetupArgs) -> CliResult {
    let size = parse_size(&a.btrfs)?;
    let image = a
        .image
        .unwrap_or_else(|| PathBuf::from("/var/lib/agentbox/btrfs.img"));
    let report = ctx.boxes().setup_btrfs(&image, size)?;
    ctx.out(&report, || {
        let mut s = format!(
            "Created a {} btrfs filesystem in {} and mounted it at {}.\nThe agentbox store lives there now: snapshots are btrfs subvolumes (O(1)).\n\nWhat was done:\n",
            crate::render::bytes(report.size_bytes),
            report.image.display(),
            report.mountpoint.display()
        );
        for c in &report.done {
            s.push_str(&format!("  {c}\n"));
        }
        s.push_str("\nTo mount it again after a reboot, add this line to /etc/fstab:\n");
        s.push_str(&format!("  {}\n\nTo undo (destroys the store and everything in it):\n", report.fstab_line));
        for c in &report.undo {
            s.push_str(&format!("  {c}\n"));
        }
        s
    })
}

/// Parse sizes like `20G`, `512M`, `1T`, `1048576`.
pub(super) fn parse_size(s: &str) -> CliResult<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => {
                    return Err(CliError::usage(
                        format!("unknown size unit in {s:?}"),
                        "use e.g. 20G or 512M",
                    ))
                }
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| CliError::usage(format!("invalid size {s:?}"), "use e.g. 20G or 512M"))?;
    n.checked_mul(mult)
        .ok_or_else(|| CliError::usage(format!("size {s:?} is too large"), "use e.g. 20G"))
}

pub(super) fn env(ctx: &Ctx, a: crate::args::EnvArgs) -> CliResult {
    let made = ctx.boxes().version_dir(
        &agentbox_boxes::lifecycle::directories::VersionDir {
            dir: a.dir.clone(),
            name: a.name.clone(),
            from: a.from.clone(),
            message: a.message.clone(),
            backend: parse_backend(a.backend.as_deref())?,
        },
        ctx,
    )?;
    let state = &made.env;
    ctx.out(&made, || {
            format!(
                "{} is now versioned as environment {:?} (node {}).\nEdit it with any tool, then: agentbox commit {} -m \"what changed\"\n",
                render::place(&state.mountpoint),
                state.name,
                render::short(&state.head),
                state.name
            )
    })
}

/// `list`: the current project's boxes (all boxes outside a project, or with `--all`), and
/// versioned directories unless the list is limited to a project.
pub(super) fn list(ctx: &Ctx, all: bool) -> CliResult {
    let here = if all { None } else { ctx.here()? };
    let rows = ctx.boxes().list(here.as_deref())?;
    if let (Some(p), true) = (&here, rows.is_empty()) {
        let others = agentbox_boxes::records::record::list(&ctx.home)?.len();
        ctx.note(format!(
            "no boxes of project {}{}",
            p.display(),
            if others > 0 {
                format!(
                    "; `agentbox list --all` shows {}",
                    render::count(others, "other", "others")
                )
            } else {
                "; `agentbox create` makes one".to_owned()
            }
        ));
    }
    // Box numbers are per project: listed across projects, each says which.
    let across = here.is_none();
    ctx.out(&rows, || {
        let mut s = format!(
            "{:<4} {}{:<20} {:<9} {:<8} {:<13} {:<24} WHERE\n",
            "#",
            if across {
                format!("{:<16} ", "PROJECT")
            } else {
                String::new()
            },
            "NAME",
            "ID",
            "STATE",
            "HEAD",
            "BRANCH"
        );
        for r in &rows {
            let place = match (&r.env.mountpoint, &r.source) {
                (Some(m), _) => m.display().to_string(),
                (None, Some(src)) => format!("/workspace (from {})", src.display()),
                (None, None) => "/workspace".to_owned(),
            };
            let (index, name, id, branch) = match &r.record {
                Some(b) => (
                    b.index.to_string(),
                    render::box_name(b),
                    b.id[..8.min(b.id.len())].to_owned(),
                    match b.repos.as_slice() {
                        [] => "-".to_owned(),
                        [one] => one.branch.clone(),
                        [first, rest @ ..] => format!("{} +{}", first.branch, rest.len()),
                    },
                ),
                None => ("-".into(), r.env.name.clone(), "-".into(), "-".into()),
            };
            let project = match (across, r.record.as_ref().and_then(|b| b.project.as_deref())) {
                (false, _) => String::new(),
                (true, Some(p)) => format!(
                    "{:<16} ",
                    render::text(&p.file_name().unwrap_or(p.as_os_str()).to_string_lossy())
                ),
                (true, None) => format!("{:<16} ", "-"),
            };
            s.push_str(&format!(
                "{:<4} {project}{:<20} {:<9} {:<8} {:<13} {:<24} {}\n",
                index,
                name,
                id,
                r.state.as_str(),
                render::short(&r.env.head),
                branch,
                place
            ));
        }
        s
    })
}

pub(super) fn export(ctx: &Ctx, a: crate::args::ExportArgs) -> CliResult {
    let (env, rest) = ctx.env_and_args(&a.args, 0, 1)?;
    let kind = a
        .kind
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --kind history, snapshot or rootfs"))?;
    let compression = a
        .compress
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --compress zstd, gzip or none"))?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let report = ctx.transfer("exporting", || {
        ctx.boxes()
            .export(&env, reference, kind, compression, &a.output)
    })?;
    let to_stdout = a.output == Path::new("-");
    let summary = format!(
        "exported {} of {env} ({} bundle) to {}",
        render::count(report.nodes, "node", "nodes"),
        report.kind,
        if to_stdout {
            "stdout".to_owned()
        } else {
            a.output.display().to_string()
        }
    );
    if to_stdout {
        // The bundle itself is on stdout: the summary must not be mixed into it.
        ctx.note(summary);
        return ctx.out(&report, String::new);
    }
    ctx.out(&report, || format!("{summary}\n"))
}

pub(super) fn import(ctx: &Ctx, a: crate::args::ImportArgs) -> CliResult {
    let name = match &a.name {
        Some(n) => n.clone(),
        None => agentbox_boxes::lifecycle::directories::dir_name(&a.dir)?,
    };
    let max_size = a.max_size.as_deref().map(parse_size).transpose()?;
    let options = agentbox_store::transfer::ImportOptions {
        allow_devices: a.allow_devices,
        allow_setuid: a.allow_setuid,
        max_size,
    };
    let report = ctx.transfer("importing", || {
        ctx.boxes().import(&a.source, &name, &a.dir, options)
    })?;
    ctx.out(&report, || {
        let held = match report.reused_nodes {
            0 => String::new(),
            n if n == report.nodes => ", all already in the store".to_owned(),
            n => format!(", {n} of them already in the store"),
        };
        let mut s = format!(
            "imported {} ({}{held}) as environment {name:?} at {}\n",
            report.kind,
            render::count(report.nodes, "node", "nodes"),
            a.dir.display()
        );
        if report.stripped_setuid > 0 {
            s.push_str(&format!(
                "stripped setuid/setgid or file capabilities from {}; --allow-setuid keeps them\n",
                render::count(report.stripped_setuid, "file", "files")
            ));
        }
        if report.dropped_overlay_xattrs > 0 {
            s.push_str(&format!(
                "ignored {} (trusted.overlay.*, user.overlay.*) found in the archive; they are never imported\n",
                render::count(report.dropped_overlay_xattrs, "overlayfs attribute", "overlayfs attributes")
            ));
        }
        if report.dropped_privileged_xattrs > 0 {
            s.push_str(&format!(
                "ignored {} (trusted.*, security.*) found in the archive; they are never imported\n",
                render::count(report.dropped_privileged_xattrs, "privileged attribute", "privileged attributes")
            ));
        }
        s
    })
}

pub(super) fn fsck(ctx: &Ctx, a: crate::args::FsckArgs) -> CliResult {
    // Not reconciled on open: what a crash left is what fsck is here to report.
    let report = ctx.boxes().fsck(a.repair)?;
    ctx.out(&report, || {
        let mut s = String::new();
        for r in &report.repairs {
            s.push_str(&format!("repaired: {r}\n"));
        }
        for p in &report.problems {
            s.push_str(&format!(
                "problem: {}: {}{}\n",
                p.path.display(),
                p.message,
                if p.repairable {
                    " (fsck --repair fixes it)"
                } else {
                    ""
                }
            ));
        }
        if report.unreferenced_layers > 0 {
            s.push_str(&format!(
                "{} no longer referenced{}: `agentbox gc` (or `agentbox prune`) frees {}\n",
                render::count(report.unreferenced_layers, "layer is", "layers are"),
                if report.leftovers_checked {
                    format!(" ({})", render::bytes(report.unreferenced_bytes))
                } else {
                    String::new()
                },
                if report.unreferenced_layers == 1 { "it" } else { "them" }
            ));
        }
        if !report.leftovers_checked && !a.repair {
            s.push_str("another agentbox process is using the store: half-made data was not checked (run fsck again when it is idle)\n");
        }
        s.push_str(&format!(
            "{}, {}, {}: {}\n",
            render::count(report.nodes, "node", "nodes"),
            render::count(report.layers, "layer", "layers"),
            render::count(report.environments, "environment", "environments"),
            if report.problems.is_empty() {
                "consistent"
            } else {
                "PROBLEMS FOUND"
            }
        ));
        s
    })?;
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(
            crate::errors::ExitCode::Inconsistent,
            format!(
                "{} found",
                render::count(
                    report.problems.len(),
                    "consistency problem",
                    "consistency problems"
                )
            ),
            Some("run `agentbox fsck --repair`".into()),
        ))
    }
}

pub(super) fn mount(ctx: &Ctx, args: &[String], mount: bool) -> CliResult {
    let (env, _) = ctx.env_and_args(args, 0, 0)?;
    let state = ctx.boxes().mount(&env, mount)?;
    ctx.out(&state, || {
        format!(
            "{} {}\n",
            if mount { "mounted" } else { "unmounted" },
            render::place(&state.mountpoint)
        )
    })
}

pub(super) fn destroy(ctx: &Ctx, args: &[String], delete_branch: bool) -> CliResult {
    // Destroying is never implicit: the box is always named.
    let Some(reference) = ctx.env.clone().or_else(|| args.first().cloned()) else {
        return Err(CliError::usage(
            "destroy needs the box's name (or number, or id)",
            "agentbox destroy BOX; `agentbox list` shows the boxes",
        ));
    };
    if !ctx.boxes().is_directory(&reference) {
        let rec = ctx.resolve_box(Some(&reference))?;
        let name = rec.name.clone();
        let deleted = ctx.boxes().destroy(&name, delete_branch, ctx)?;
        return ctx.out(
            &serde_json::json!({ "destroyed": name, "id": rec.id, "deleted_branches": deleted }),
            || {
                let mut s =
                    format!("destroyed box {name:?} (`agentbox gc` frees unreferenced data)\n");
                for b in &deleted {
                    s.push_str(&format!("deleted branch {b}\n"));
                }
                s
            },
        );
    }
    let env = reference;
    let state = ctx.boxes().remove_directory(&env)?;
    ctx.out(&state, || {
        format!(
            "destroyed environment {env:?} ({} is unmounted; `agentbox gc` frees unreferenced data)\n",
            render::place(&state.mountpoint)
        )
    })
}
