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

pub(super) fn dir_name(dir: &Path) -> CliResult<String> {
    let abs = std::path::absolute(dir)?;
    abs.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            CliError::usage(format!("{} has no name", dir.display()), "pass --name NAME")
        })
}

pub(super) fn setup(ctx: &Ctx, a: crate::args::SetupArgs) -> CliResult {
    let size = parse_size(&a.btrfs)?;
    let image = a
        .image
        .unwrap_or_else(|| PathBuf::from("/var/lib/agentbox/btrfs.img"));
    let mountpoint = ctx.store_dir();
    if mountpoint.join("store.json").exists() {
        return Err(CliError::new(crate::errors::ExitCode::Refused,
            format!("a store already exists at {}", mountpoint.display()),
            Some("setup makes a new btrfs store; use another --home (AGENTBOX_HOME) or remove the existing store".into()),
        ));
    }
    let report = agentbox_store::setup::setup_loop_btrfs(&image, size, &mountpoint)?;
    Store::init(&mountpoint, Some(BackendKind::Btrfs))?;
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

#[derive(Serialize)]
pub(super) struct EnvCreated<'a> {
    env: &'a agentbox_store::EnvState,
    backend: BackendKind,
    store: PathBuf,
}

pub(super) fn env(ctx: &Ctx, a: crate::args::EnvArgs) -> CliResult {
    let name = match &a.name {
        Some(n) => n.clone(),
        None => agentbox_store::names::from_dir_name(&dir_name(&a.dir)?),
    };
    let store = Store::open_or_init(&ctx.store_dir(), parse_backend(a.backend.as_deref())?)?;
    store.check_new_env_name(&name).map_err(|e| {
        let mut e = CliError::from(e);
        if a.name.is_none() {
            e.hint = Some("the name comes from the directory; choose one with --name NAME".into());
        }
        e
    })?;
    let dir = std::path::absolute(&a.dir)?;
    // Held until the environment exists: see `Store::hold`.
    let _staging = store.hold("create an environment")?;
    let (source, message) = match &a.from {
        None if dir.exists() => (
            Source::Dir(dir.clone()),
            a.message
                .clone()
                .unwrap_or_else(|| format!("content of {}", dir.display())),
        ),
        None => (
            Source::Empty,
            a.message.clone().unwrap_or_else(|| "empty".into()),
        ),
        Some(src) => {
            let p = Path::new(src);
            let msg = a.message.clone().unwrap_or_else(|| format!("from {src}"));
            if p.is_dir() {
                (Source::Dir(p.to_owned()), msg)
            } else {
                let staged = ctx.busy("fetching and unpacking the rootfs", || {
                    agentbox_store::transfer::stage_rootfs(&store, src)
                })?;
                (Source::Staged(staged), msg)
            }
        }
    };
    ctx.note(format!(
        "Creating environment {name:?} at {} ({} backend)…",
        dir.display(),
        store.config().backend
    ));
    let state = ctx.busy("copying the tree into the first node", || {
        store.create_env(&name, Some(&dir), source, &message)
    })?;
    ctx.out(
        &EnvCreated {
            env: &state,
            backend: store.config().backend,
            store: store.root().to_owned(),
        },
        || {
            format!(
                "{} is now versioned as environment {:?} (node {}).\nEdit it with any tool, then: agentbox commit {} -m \"what changed\"\n",
                render::place(&state.mountpoint),
                state.name,
                render::short(&state.head),
                state.name
            )
        },
    )
}

/// One row of `list`: an environment, and whether it is a box or a versioned directory.
#[derive(Serialize)]
pub(super) struct Listed {
    #[serde(flatten)]
    env: agentbox_store::EnvState,
    /// "box" or "directory".
    kind: &'static str,
    /// Boxes: "running" or "stopped"; directories: "mounted" or "unmounted".
    state: &'static str,
    /// Boxes: the directory the workspace was copied from.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<PathBuf>,
    /// Boxes: the box's record (id, number, display name, project, branches…).
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    record: Option<BoxRecord>,
}

/// `list`: the current project's boxes (all boxes outside a project, or with `--all`), and
/// versioned directories unless the list is limited to a project.
pub(super) fn list(ctx: &Ctx, all: bool) -> CliResult {
    let store = ctx.store()?;
    let here = if all { None } else { ctx.here()? };
    let records: std::collections::BTreeMap<String, BoxRecord> =
        agentbox_boxes::record::list(&ctx.home)?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
    let mut rows: Vec<Listed> = Vec::new();
    for env in store.envs()? {
        match &env.mountpoint {
            Some(m) if here.is_none() => rows.push(Listed {
                state: if agentbox_store::mounts::is_mountpoint(m) {
                    "mounted"
                } else {
                    "unmounted"
                },
                kind: "directory",
                source: None,
                record: None,
                env,
            }),
            Some(_) => {}
            None => {
                let record = records.get(&env.name).cloned();
                if here.is_some()
                    && record.as_ref().and_then(|r| r.project.as_deref()) != here.as_deref()
                {
                    continue;
                }
                rows.push(Listed {
                    state: if ctx
                        .boxes()
                        .provider()
                        .is_running(&env.name)
                        .unwrap_or(false)
                    {
                        "running"
                    } else {
                        "stopped"
                    },
                    kind: "box",
                    source: record.as_ref().and_then(|r| r.source.clone()),
                    record,
                    env,
                })
            }
        }
    }
    // Boxes by project and number; directories after them.
    rows.sort_by(|a, b| {
        let key = |r: &Listed| {
            (
                r.record.is_none(),
                r.record.as_ref().and_then(|x| x.project.clone()),
                r.record.as_ref().map(|x| x.index),
                r.env.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    if let (Some(p), true) = (&here, rows.is_empty()) {
        let others = records.len();
        ctx.note(format!(
            "no boxes of project {}{}",
            p.display(),
            if others > 0 {
                format!("; `agentbox list --all` shows {others} other(s)")
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
                    b.shown_name().to_owned(),
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
                r.state,
                render::short(&r.env.head),
                branch,
                place
            ));
        }
        s
    })
}

pub(super) fn export(ctx: &Ctx, a: crate::args::ExportArgs) -> CliResult {
    let store = ctx.store()?;
    let (env, rest) = ctx.env_and_args(&store, &a.args, 0, 1)?;
    let kind = a
        .kind
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --kind history, snapshot or rootfs"))?;
    let compression = a
        .compress
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --compress zstd, gzip or none"))?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let report =
        agentbox_store::transfer::export(&store, &env, reference, kind, compression, &a.output)?;
    ctx.note(format!(
        "exported {} node(s) of {env} to {}",
        report.nodes,
        a.output.display()
    ));
    ctx.out(&report, String::new)
}

pub(super) fn import(ctx: &Ctx, a: crate::args::ImportArgs) -> CliResult {
    let store = Store::open_or_init(&ctx.store_dir(), None)?;
    let name = match &a.name {
        Some(n) => n.clone(),
        None => dir_name(&a.dir)?,
    };
    let max_size = a.max_size.as_deref().map(parse_size).transpose()?;
    let options = agentbox_store::transfer::ImportOptions {
        allow_devices: a.allow_devices,
        allow_setuid: a.allow_setuid,
        max_size,
    };
    let report = agentbox_store::transfer::import(&store, &a.source, &name, &a.dir, options)?;
    ctx.out(&report, || {
        let mut s = format!(
            "imported {} ({} node(s)) as environment {name:?} at {}\n",
            report.kind,
            report.nodes,
            a.dir.display()
        );
        if report.stripped_setuid > 0 {
            s.push_str(&format!(
                "stripped setuid/setgid or file capabilities from {} file(s); --allow-setuid keeps them\n",
                report.stripped_setuid
            ));
        }
        if report.dropped_overlay_xattrs > 0 {
            s.push_str(&format!(
                "ignored {} overlayfs attribute(s) (trusted.overlay.*, user.overlay.*) found in the archive; they are never imported\n",
                report.dropped_overlay_xattrs
            ));
        }
        s
    })
}

pub(super) fn fsck(ctx: &Ctx, a: crate::args::FsckArgs) -> CliResult {
    // Not reconciled on open: what a crash left is what fsck is here to report.
    let store = ctx.store_unreconciled()?;
    let report = store.fsck(a.repair)?;
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
                "{} layers are no longer referenced{}: `agentbox gc` (or `agentbox prune`) frees them\n",
                report.unreferenced_layers,
                if report.leftovers_checked {
                    format!(" ({})", render::bytes(report.unreferenced_bytes))
                } else {
                    String::new()
                }
            ));
        }
        if !report.leftovers_checked && !a.repair {
            s.push_str("another agentbox process is using the store: half-made data was not checked (run fsck again when it is idle)\n");
        }
        s.push_str(&format!(
            "{} nodes, {} layers, {} environments: {}\n",
            report.nodes,
            report.layers,
            report.environments,
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
            format!("{} consistency problem(s) found", report.problems.len()),
            Some("run `agentbox fsck --repair`".into()),
        ))
    }
}

pub(super) fn mount(ctx: &Ctx, args: &[String], mount: bool) -> CliResult {
    let store = ctx.store()?;
    let (env, _) = ctx.env_and_args(&store, args, 0, 0)?;
    let state = if mount {
        store.mount_env(&env)?
    } else {
        store.unmount_env(&env)?
    };
    ctx.out(&state, || {
        format!(
            "{} {}\n",
            if mount { "mounted" } else { "unmounted" },
            render::place(&state.mountpoint)
        )
    })
}

pub(super) fn destroy(ctx: &Ctx, args: &[String], delete_branch: bool) -> CliResult {
    let store = ctx.store()?;
    // Destroying is never implicit: the box is always named.
    let Some(reference) = ctx.env.clone().or_else(|| args.first().cloned()) else {
        return Err(CliError::usage(
            "destroy needs the box's name (or number, or id)",
            "agentbox destroy BOX; `agentbox list` shows the boxes",
        ));
    };
    let is_directory = store.env(&reference).is_ok_and(|e| e.mountpoint.is_some());
    if !is_directory {
        let rec = ctx.resolve_box(Some(&reference))?;
        let name = rec.name.clone();
        let deleted = ctx.boxes().destroy(&store, &name, delete_branch, ctx)?;
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
    let state = store.env(&env)?;
    store.remove_env(&env)?;
    ctx.out(&state, || {
        format!(
            "destroyed environment {env:?} ({} is unmounted; `agentbox gc` frees unreferenced data)\n",
            render::place(&state.mountpoint)
        )
    })
}
