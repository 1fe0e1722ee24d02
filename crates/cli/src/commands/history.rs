//! History commands: commit, checkout, log, show, diff, tag, delete, retain, gc.

use super::*;

pub(super) fn commit(ctx: &Ctx, a: crate::args::CommitArgs) -> CliResult {
    let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
    let opts = CommitOpts {
        message: a.message,
        command: a.command,
        ..CommitOpts::default()
    };
    let node = ctx.boxes().commit(&env, opts)?;
    ctx.out(&node, || {
        format!(
            "[{env} {}] {}\n",
            render::short(&node.id),
            render::text(&node.message)
        )
    })
}

pub(super) fn checkout(ctx: &Ctx, args: &[String], keep_processes: bool) -> CliResult {
    let (env, rest) = ctx.env_and_args(args, 1, 1)?;
    let done = ctx.boxes().checkout(&env, &rest[0], keep_processes)?;
    let killed = done.killed;
    if killed > 0 {
        ctx.note(format!(
            "killed {} of box {env:?}",
            render::count(killed, "process", "processes")
        ));
    }
    let node = done.node;
    let state = ctx.boxes().env(&env)?;
    let inside = |m: &Path| {
        std::env::current_dir().is_ok_and(|cwd| cwd.starts_with(m))
            || std::env::var_os("PWD").is_some_and(|p| Path::new(&p).starts_with(m))
    };
    if state.mountpoint.as_deref().is_some_and(inside) {
        // The working tree was remounted: a shell already inside it still sees the old one.
        ctx.note(format!(
            "note: {} was remounted; shells already inside it see the previous tree until they run: cd \"$PWD\"",
            render::place(&state.mountpoint)
        ));
    }
    /// `checkout --json`: the node now HEAD, and how many of the box's processes the
    /// checkout killed (0 for a versioned directory, or with --keep-processes).
    #[derive(Serialize)]
    struct CheckedOut<'a> {
        #[serde(flatten)]
        node: &'a agentbox_store::Node,
        killed: usize,
    }
    ctx.out(
        &CheckedOut {
            node: &node,
            killed,
        },
        || {
            format!(
                "{env}: HEAD is now {} {}\n",
                render::short(&node.id),
                render::text(&node.message)
            )
        },
    )
}

pub(super) fn log(ctx: &Ctx, a: crate::args::LogArgs) -> CliResult {
    let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
    if a.ancestors || a.leaves || a.max_count.is_some() {
        let listed = if a.ancestors || a.max_count.is_some() {
            ctx.boxes().ancestors(&env, a.max_count)?
        } else {
            ctx.boxes().leaves(&env)?
        };
        let tags = render::tags_by_node(&listed.tags);
        return ctx.out(&listed.nodes, || {
            listed
                .nodes
                .iter()
                .map(|n| format!("{}\n", render::node_line(n, &listed.head, &tags)))
                .collect()
        });
    }
    let h = ctx.boxes().history(&env)?;
    ctx.out(&h, || render::tree(&h))
}

pub(super) fn show(ctx: &Ctx, args: &[String]) -> CliResult {
    let (env, rest) = ctx.env_and_args(args, 0, 1)?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let shown = ctx.boxes().show(&env, reference)?;
    ctx.out(&shown, || {
        let mut s = format!(
            "{}\nparent: {}\n",
            render::node_line(&shown.node, &shown.head, &render::tags_by_node(&shown.tags)),
            shown
                .node
                .parent
                .as_deref()
                .map(render::short)
                .unwrap_or("(none)")
        );
        s.push_str(&render::changes(&shown.changes));
        s
    })
}

pub(super) fn diff(ctx: &Ctx, a: crate::args::DiffArgs) -> CliResult {
    let (env, rest) = ctx.env_and_args(&a.args, 0, 2)?;
    let from = rest.first().map(String::as_str).unwrap_or("HEAD");
    let to = rest.get(1).map(String::as_str);
    if !a.patch {
        let changes = ctx.boxes().diff(&env, from, to)?;
        return ctx.out(&changes, || render::changes(&changes));
    }
    let patched = ctx.boxes().diff_patch(&env, from, to)?;
    ctx.out(&patched, || {
        let changes: Vec<_> = patched.iter().map(|p| p.change.clone()).collect();
        let mut s = render::changes(&changes);
        for p in patched
            .iter()
            .filter(|p| !render::in_git_dir(&p.change.path))
        {
            if let Some(text) = &p.patch {
                s.push('\n');
                s.push_str(&render::text_block(text));
            }
        }
        s
    })
}

pub(super) fn tag(ctx: &Ctx, a: crate::args::TagArgs) -> CliResult {
    if let Some(name) = &a.delete {
        let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
        let id = ctx.boxes().untag(&env, name)?;
        ctx.note(format!("deleted tag {name} (was {})", render::short(&id)));
        return ctx.out(
            &serde_json::json!({"deleted": name, "node": id}),
            String::new,
        );
    }
    let (env, rest) = ctx.env_and_args(&a.args, 0, 2)?;
    match rest.as_slice() {
        [] => {
            let tags = ctx.boxes().tags(&env)?;
            ctx.out(&tags, || {
                let mut s = format!("{:<24} NODE\n", "TAG");
                for (t, id) in &tags {
                    s.push_str(&format!("{:<24} {}\n", render::text(t), render::short(id)));
                }
                s
            })
        }
        [name, reference @ ..] => {
            let reference = reference.first().map(String::as_str).unwrap_or("HEAD");
            let id = ctx.boxes().tag(&env, name, reference)?;
            ctx.out(&serde_json::json!({"tag": name, "node": id}), || {
                format!("{name} -> {}\n", render::short(&id))
            })
        }
    }
}

pub(super) fn delete(ctx: &Ctx, args: &[String]) -> CliResult {
    let (env, rest) = ctx.env_and_args(args, 1, 1)?;
    let node = ctx.boxes().delete_node(&env, &rest[0])?;
    ctx.out(&node, || {
        format!(
            "deleted node {} {} (its children now descend from {}); `agentbox gc` frees its data\n",
            render::short(&node.id),
            render::text(&node.message),
            node.parent
                .as_deref()
                .map(render::short)
                .unwrap_or("nothing")
        )
    })
}

pub(super) fn retain(ctx: &Ctx, a: crate::args::RetainArgs) -> CliResult {
    let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
    let report = ctx.boxes().retain(&env, a.keep)?;
    ctx.out(&report, || {
        format!(
            "{env}: kept {}, dropped {}; `agentbox gc` frees their data\n",
            render::count(report.kept, "node", "nodes"),
            report.dropped.len()
        )
    })
}

pub(super) fn gc(ctx: &Ctx, dry_run: bool) -> CliResult {
    if dry_run {
        let report = ctx.boxes().gc_dry_run()?;
        #[derive(serde::Serialize)]
        struct DryRun<'a> {
            dry_run: bool,
            #[serde(flatten)]
            report: &'a agentbox_store::gc::GcReport,
        }
        let json = DryRun {
            dry_run: true,
            report: &report,
        };
        return ctx.out(&json, || {
            let mut s = format!(
                "would remove {} and {}, freeing about {}; nothing removed\n",
                render::count(
                    report.removed_nodes.len(),
                    "unreachable node",
                    "unreachable nodes"
                ),
                render::count(
                    report.removed_layers.len(),
                    "unreferenced layer",
                    "unreferenced layers"
                ),
                render::bytes(
                    report
                        .disk_bytes_before
                        .saturating_sub(report.disk_bytes_after)
                ),
            );
            for n in &report.removed_nodes {
                s.push_str(&format!("  node  {n}\n"));
            }
            for l in &report.removed_layers {
                s.push_str(&format!("  layer {l}\n"));
            }
            s
        });
    }
    let report = ctx.busy("collecting garbage", || ctx.boxes().gc())?;
    ctx.out(&report, || {
        format!(
            "removed {}; store disk usage {} -> {}\n",
            render::count(
                report.removed_layers.len(),
                "unreferenced layer",
                "unreferenced layers"
            ),
            render::bytes(report.disk_bytes_before),
            render::bytes(report.disk_bytes_after)
        )
    })
}
