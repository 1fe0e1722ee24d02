//! `agentbox list`: boxes (this project's, or `--all`) and versioned directories.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

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
