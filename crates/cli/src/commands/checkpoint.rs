//! `agentbox checkpoint`: create, list, show, remove a project's warm checkpoints and set
//! its default (the library does the work: `agentbox_boxes::checkpoints::checkpoint`).

use agentbox_boxes::checkpoints::checkpoint::{Checkpoint, CheckpointSpec};

use super::ctx::Ctx;
use crate::args::{parse_size, CheckpointCmd};
use crate::errors::CliResult;
use crate::render;

pub(super) fn checkpoint(ctx: &Ctx, cmd: Option<CheckpointCmd>) -> CliResult {
    match cmd.unwrap_or(CheckpointCmd::Ls { all: false }) {
        CheckpointCmd::Create {
            name,
            checkpoint,
            set_default,
            merged,
            replace,
        } => {
            let rec = ctx.resolve_box(name.as_deref())?;
            let made = ctx.busy("capturing the checkpoint", || {
                ctx.boxes().checkpoint_create(&CheckpointSpec {
                    box_name: rec.name.to_string(),
                    name: checkpoint,
                    set_default,
                    merged,
                    replace,
                    in_box: ctx.relayed(),
                })
            })?;
            let m = &made.manifest;
            if let Some(held) = &m.held {
                ctx.note(format!(
                    "the checkpoint is image {}",
                    render::text(&held.image)
                ));
            }
            if let Some(why) = &m.cleaned.command_failed {
                // The box's text: escaped.
                ctx.note(format!(
                    "warning: checkpoint.cleanupCommand {} (the checkpoint was made anyway)",
                    render::text(why)
                ));
            }
            ctx.out(&made, || {
                format!(
                    "checkpoint {:?} of box {:?} ({}, node {}; cleaned {}, emptied {}, {}){}\nStart a box from it: agentbox create --checkpoint {}\n",
                    m.name,
                    m.source_box,
                    kind(m.kind),
                    render::short(&m.node),
                    render::count(m.cleaned.deleted, "path", "paths"),
                    render::count(m.cleaned.truncated, "file", "files"),
                    render::bytes(m.cleaned.bytes),
                    if made.default { "; the project's default" } else { "" },
                    render::text(&m.name)
                )
            })
        }
        CheckpointCmd::Ls { all } => {
            let here = ctx.here()?;
            let list = ctx.boxes().checkpoints(here.as_deref(), all)?;
            if list.is_empty() && !ctx.json {
                ctx.note("no checkpoints; `agentbox checkpoint create [BOX]` captures one");
            }
            ctx.out(&list, || table(&list, all))
        }
        CheckpointCmd::Show { name } => {
            let here = ctx.here()?;
            let c = ctx.boxes().find_checkpoint(here.as_deref(), &name)?;
            ctx.out(&c, || show(&c))
        }
        CheckpointCmd::Rm { names } => {
            let here = ctx.here()?;
            let mut removed = Vec::new();
            for n in &names {
                let m = ctx.boxes().checkpoint_remove(here.as_deref(), n)?;
                ctx.note(format!(
                    "removed checkpoint {:?} (`agentbox gc` frees its data)",
                    m.name
                ));
                removed.push(m.name);
            }
            ctx.out(&serde_json::json!({ "removed": removed }), String::new)
        }
        CheckpointCmd::Export { name, output } => {
            let here = ctx.here()?;
            let done = ctx.transfer("writing the checkpoint", || {
                ctx.boxes()
                    .checkpoint_export(here.as_deref(), &name, &output)
            })?;
            ctx.out(&done, || {
                format!(
                    "wrote checkpoint {:?} to {} ({}); on another machine: agentbox checkpoint import {}\n",
                    done.name,
                    done.output.display(),
                    render::bytes(done.bytes),
                    done.output.display()
                )
            })
        }
        CheckpointCmd::Import {
            file,
            checkpoint,
            allow_setuid,
            max_size,
        } => {
            let here = ctx.here()?;
            let options = agentbox_store::transfer::ImportOptions {
                allow_devices: false,
                allow_setuid,
                max_size: max_size.as_deref().map(parse_size).transpose()?,
            };
            let made = ctx.transfer("importing the checkpoint", || {
                ctx.boxes().checkpoint_import(
                    &file,
                    here.as_deref(),
                    checkpoint.as_deref(),
                    options,
                )
            })?;
            ctx.out(&made, || {
                format!(
                    "imported checkpoint {:?} ({}) for {}\nStart a box from it: agentbox create --checkpoint {}\n",
                    made.manifest.name,
                    made.state.as_str(),
                    made.manifest
                        .project
                        .as_deref()
                        .map(|p| format!("project {}", render::path(p)))
                        .unwrap_or_else(|| "boxes outside a project".to_owned()),
                    render::text(&made.manifest.name)
                )
            })
        }
        CheckpointCmd::SetDefault { name, clear } => {
            let here = ctx.here()?;
            let name = if clear { None } else { name };
            ctx.boxes()
                .checkpoint_set_default(here.as_deref(), name.as_deref())?;
            ctx.out(&serde_json::json!({ "default": name }), || match &name {
                Some(n) => format!("new boxes of this project start from checkpoint {n:?}\n"),
                None => "new boxes of this project start without a checkpoint\n".to_owned(),
            })
        }
    }
}

fn kind(k: agentbox_boxes::checkpoints::checkpoint::CheckpointKind) -> &'static str {
    match k {
        agentbox_boxes::checkpoints::checkpoint::CheckpointKind::Layered => "layered",
        agentbox_boxes::checkpoints::checkpoint::CheckpointKind::Flattened => "flattened",
    }
}

fn table(list: &[Checkpoint], all: bool) -> String {
    let mut s = format!(
        "{}{:<24} {:<10} {:<13} {:<8} {:<20} {:<20} NODE\n",
        if all {
            format!("{:<16} ", "PROJECT")
        } else {
            String::new()
        },
        "NAME",
        "KIND",
        "STATE",
        "DEFAULT",
        "FROM BOX",
        "CREATED"
    );
    for c in list {
        let m = &c.manifest;
        let project = if all {
            format!(
                "{:<16} ",
                m.project
                    .as_deref()
                    .and_then(|p| p.file_name())
                    .map(|n| render::text(&n.to_string_lossy()).to_string())
                    .unwrap_or_else(|| "-".into())
            )
        } else {
            String::new()
        };
        s.push_str(&format!(
            "{project}{:<24} {:<10} {:<13} {:<8} {:<20} {:<20} {}\n",
            render::text(&m.name),
            kind(m.kind),
            c.state.as_str(),
            if c.default { "yes" } else { "" },
            render::text(&m.source_box),
            render::time(&m.created),
            render::text(render::short(&m.node))
        ));
    }
    s
}

fn show(c: &Checkpoint) -> String {
    let m = &c.manifest;
    let mut s = format!(
        "checkpoint {}\n  kind:      {}\n  state:     {}{}\n  node:      {}\n  from box:  {} (id {})\n  base:      {}\n  lineage:   {}\n  created:   {} (agentbox {})\n",
        render::text(&m.name),
        kind(m.kind),
        c.state.as_str(),
        if c.default { " (the project's default)" } else { "" },
        render::text(&m.node),
        render::text(&m.source_box),
        render::text(&m.source_box_id),
        match &m.base.image {
            Some(i) => format!("image {}", render::text(i)),
            None => "the host's /".to_owned(),
        },
        if m.lineage.is_empty() {
            "(none)".to_owned()
        } else {
            render::text(&m.lineage.join(" <- ")).to_string()
        },
        render::time(&m.created),
        render::text(&m.version)
    );
    for r in &m.repos {
        s.push_str(&format!(
            "  repository {}: branch {} at {}\n",
            render::path(&r.repository),
            render::text(&r.branch),
            render::text(
                r.tip
                    .as_deref()
                    .map(render::short)
                    .unwrap_or("(not synced)")
            )
        ));
    }
    s
}
