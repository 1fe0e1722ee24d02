//! `agentbox status`: the store, an environment, a box.

use agentbox_boxes::records::record::BoxDirs;
use serde::Serialize;

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn status(ctx: &Ctx, args: &[String], usage: bool) -> CliResult {
    let env = if ctx.env.is_some() || !args.is_empty() {
        Some(ctx.env_and_args(args, 0, 0)?.0)
    } else {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| ctx.boxes().env_for_path(&cwd).ok().flatten())
            .map(|e| e.name)
            // Inside a project with one box: that box.
            .or_else(|| ctx.resolve_box(None).ok().map(|r| r.name.into_string()))
    };
    let st = ctx.boxes().store_status(env.as_deref(), usage)?;
    let boxed = match &env {
        Some(name) if is_box(ctx, name) => Some(ctx.boxes().status(name)?),
        _ => None,
    };
    // In a project with several boxes and none named: which boxes there are.
    let project = match &env {
        None => ctx.here()?,
        Some(_) => None,
    };
    let mut project_boxes: Vec<ProjectBox> = match &project {
        Some(p) => agentbox_boxes::records::record::list(&ctx.home)?
            .into_iter()
            .filter(|r| r.project.as_deref() == Some(p.as_path()))
            .map(|r| ProjectBox {
                // Each box's own provider says (a Docker box's is its container's).
                state: if ctx
                    .boxes()
                    .provider_of(&r.name)
                    .and_then(|p| p.is_running(&r.name))
                    .unwrap_or(false)
                {
                    "running"
                } else {
                    "stopped"
                },
                index: r.index,
                name: r.shown_name().to_owned(),
                listed: render::box_name(&r),
            })
            .collect(),
        None => Vec::new(),
    };
    project_boxes.sort_by_key(|b| b.index);
    #[derive(Serialize)]
    struct ProjectBox {
        index: u64,
        name: String,
        state: &'static str,
        /// As the human listing shows it (the name commands take, and the display name).
        #[serde(skip)]
        listed: String,
    }
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        store: &'a agentbox_store::history::Status,
        #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
        boxed: Option<&'a agentbox_boxes::lifecycle::ops::BoxStatus>,
        /// The current project's boxes, when no box was named and the project has more
        /// than one.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        project_boxes: Vec<ProjectBox>,
    }
    let out = Out {
        store: &st,
        boxed: boxed.as_ref(),
        project_boxes,
    };
    ctx.out(&out, || {
        let mut s = format!(
            "store:        {}\nbackend:      {} ({})\n",
            st.store.display(),
            st.backend,
            if st.backend_chosen == "auto" { "chosen by the filesystem" } else { "chosen explicitly" },
        );
        // The store-wide figures walk the whole store: shown by the store's own status.
        if let Some(t) = &st.totals {
            s.push_str(&format!(
                "environments: {}\nnodes:        {}\nlayers:       {}\ndisk usage:   {} (shared data counted once; {} apparent)\n",
                t.environments,
                t.nodes,
                t.layers,
                render::bytes(t.disk_bytes),
                render::bytes(t.logical_bytes),
            ));
        }
        if let (Some(e), Some(b)) = (&st.env, &boxed) {
            let r = &b.record;
            s.push_str(&format!(
                "\nbox:          {}{}\nid:           {}\nnumber:       {} {}\nstate:        {}\nprocesses:    {}\n",
                e.name,
                r.display_name.as_deref().map(|d| format!(" (shown as {d:?})")).unwrap_or_default(),
                r.id,
                r.index,
                match &r.project {
                    Some(p) => format!("in project {}", p.display()),
                    None => "(no project)".to_owned(),
                },
                b.state.as_str(),
                b.processes,
            ));
            if let Some(a) = &r.last_agent {
                s.push_str(&format!("last agent:   {a}\n"));
            }
            for br in &b.branches {
                let rel = match (&br.tip, br.ahead, br.behind, &br.against) {
                    (None, ..) => "not in the host repository yet".to_owned(),
                    (Some(_), Some(a), Some(bh), Some(against)) => {
                        format!("{a} ahead, {bh} behind {against}")
                    }
                    _ => "tip synced".to_owned(),
                };
                let dirty = match &br.dirty {
                    Some(d) if d.is_empty() => ", clean".to_owned(),
                    // "Committed" alone reads as `agentbox commit`, which is a snapshot of
                    // the box, not a git commit: say which kind is missing.
                    Some(d) => format!(
                        ", {} not committed to git",
                        render::count(d.len(), "path", "paths")
                    ),
                    None if b.state == agentbox_boxes::lifecycle::ops::BoxState::Stopped => {
                        ", paths not committed to git not known while the box is stopped"
                            .to_owned()
                    }
                    None => String::new(),
                };
                s.push_str(&format!(
                    "branch:       {} in {} ({rel}{dirty})\n",
                    br.branch,
                    br.repository.display()
                ));
            }
            if b.branches.iter().any(|br| br.dirty.as_ref().is_some_and(|d| !d.is_empty())) {
                s.push_str(
                    "git:          snapshots (`agentbox commit`, `agentbox log`) are not git commits; \
                     `agentbox exec -- git commit -am MESSAGE` makes one on the box's branch, \
                     which reaches the host repository by itself (`agentbox push` sends it on)\n",
                );
            }
            s.push_str(&format!(
                "base:         {}\nnetwork:      {}\nauto-capture: {}\nlimits:       {}\nchanged:      {} since HEAD\nHEAD:         {} ({})\nchain depth:  {}\n{}",
                b.base,
                b.network_shown,
                match (b.sandbox.as_ref().and_then(|x| x.capture_state.as_ref()), b.record.capture) {
                    (_, false) => "off".to_owned(),
                    (None, true) => "on".to_owned(),
                    (Some(h), true) => format!("on, {}", h.describe()),
                },
                b.limits,
                render::count(b.changed, "path", "paths"),
                render::short(&e.head),
                render::count(e.tags, "tag", "tags"),
                e.chain_depth,
                // A box whose provider holds its tree has no data in the store.
                usage_lines(e, b.sandbox.is_some().then_some("box disk:     ")),
            ));
            let scratch = b.sandbox.as_ref().map(|x| x.scratch.as_slice()).unwrap_or_default();
            if !scratch.is_empty() {
                let mounts: Vec<String> = scratch
                    .iter()
                    .map(|m| {
                        format!(
                            "{} {} of {}",
                            m.path,
                            render::bytes(m.used_bytes),
                            render::bytes(m.size_bytes)
                        )
                    })
                    .collect();
                s.push_str(&format!("in memory:    {}\n", mounts.join(", ")));
            }
            if let (Some(sandbox), agentbox_boxes::lifecycle::ops::BoxState::Running) = (&b.sandbox, b.state) {
                s.push_str(&match &sandbox.box_root {
                    Some(r) => format!(
                        "box root:     host uid {} (box ids 0-{} are host ids {}-{})\n",
                        r.uid,
                        r.count.saturating_sub(1),
                        r.uid,
                        r.uid.saturating_add(r.count.saturating_sub(1))
                    ),
                    None => "box root:     host root (no user namespace; see the supervisor's log)\n".to_owned(),
                });
            }
            if let Some(c) = &b.record.checkpoint {
                s.push_str(&format!("checkpoint:   {}\n", render::text(c)));
            }
            if !b.record.resync_conflicts.is_empty() {
                s.push_str(&format!(
                    "kept from the checkpoint (your uncommitted work also changes them): {}\n",
                    b.record
                        .resync_conflicts
                        .iter()
                        .map(|p| render::text(p))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        } else if let (Some(p), false) = (&project, out.project_boxes.is_empty()) {
            s.push_str(&format!("\nproject:      {}\n", render::path(p)));
            for b in &out.project_boxes {
                s.push_str(&format!(
                    "box #{:<6} {}: {}\n",
                    b.index,
                    b.listed,
                    b.state
                ));
            }
            s.push_str("(`agentbox status BOX` shows one)\n");
        } else if let Some(e) = &st.env {
            s.push_str(&format!(
                "\nenvironment:  {}\ndirectory:    {} ({})\nHEAD:         {} ({})\nchain depth:  {}\n{}",
                e.name,
                render::place(&e.mountpoint),
                if e.mounted { "mounted" } else { "NOT mounted: run `agentbox mount`" },
                render::short(&e.head),
                render::count(e.tags, "tag", "tags"),
                e.chain_depth,
                usage_lines(e, Some("disk:         ")),
            ));
        }
        s
    })
}

/// The lines of an environment's [`usage`](agentbox_store::history::EnvUsage), or how to
/// get them (they cost a walk of its history and data); its disk under `disk_label`
/// (`None`: the store does not hold its data, and its disk is not shown).
fn usage_lines(e: &agentbox_store::history::EnvStatus, disk_label: Option<&str>) -> String {
    match (&e.usage, disk_label) {
        (Some(u), Some(label)) => format!(
            "nodes:        {} ({})\n{label}{}\n",
            u.nodes,
            render::count(u.leaves, "branch tip", "branch tips"),
            render::bytes(u.disk_bytes),
        ),
        (Some(u), None) => format!(
            "nodes:        {} ({})\n",
            u.nodes,
            render::count(u.leaves, "branch tip", "branch tips"),
        ),
        (None, Some(_)) => "(nodes and disk: `agentbox status --usage`)\n".to_owned(),
        (None, None) => "(nodes: `agentbox status --usage`)\n".to_owned(),
    }
}

/// Whether `name` is a box (not a versioned directory's environment).
fn is_box(ctx: &Ctx, name: &str) -> bool {
    BoxDirs::new(&ctx.home, name).record().exists()
}
