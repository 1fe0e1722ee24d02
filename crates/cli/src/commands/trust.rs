//! `agentbox trust [PATH]`, `--revoke`, `--list`: which project files (`agentbox.yaml`)
//! may set what only the user's own configuration may (see
//! `agentbox_boxes::config::trusted`). Host only: the in-box `agentbox` has no request for
//! it, so a box can neither trust nor revoke.

use agentbox_boxes::config::trusted::{self, FileTrust};
use agentbox_boxes::project::{find_root, PROJECT_FILE};

use super::ctx::Ctx;
use crate::args::TrustArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn trust(ctx: &Ctx, a: TrustArgs) -> CliResult {
    if a.list {
        return list(ctx);
    }
    let cwd = agentbox_boxes::records::registry::current_dir()?;
    let file = match a.path {
        Some(p) if p.is_dir() => cwd.join(p).join(PROJECT_FILE),
        Some(p) => cwd.join(p),
        None => find_root(&cwd)
            .map(|r| r.join(PROJECT_FILE))
            .filter(|f| f.is_file())
            .ok_or_else(|| {
                CliError::new(
                    crate::errors::ExitCode::NotFound,
                    format!("no {PROJECT_FILE} in the project of {}", cwd.display()),
                    Some(format!(
                        "run it inside a project with {PROJECT_FILE}, or name the file: agentbox trust PATH"
                    )),
                )
            })?,
    };
    if a.revoke {
        let removed = trusted::revoke(&ctx.home, &file)?;
        return ctx.out(
            &serde_json::json!({"file": file, "revoked": removed}),
            || {
                if removed {
                    format!(
                        "{} is no longer trusted: its defaults may only make boxes stricter\n",
                        render::path(&file)
                    )
                } else {
                    format!("{} was not trusted\n", render::path(&file))
                }
            },
        );
    }
    let done = trusted::trust_file(&ctx.home, &file)?;
    ctx.out(&done, || {
        let keys = if done.keys.is_empty() {
            "it sets nothing only a trusted file may".to_owned()
        } else {
            format!("now applying: {}", done.keys.join(", "))
        };
        format!(
            "trusted {} as it is now (blake3 {}); {keys}. Any change to it revokes this\n",
            render::path(&done.file),
            &done.record.blake3[..16],
        )
    })
}

fn list(ctx: &Ctx) -> CliResult {
    let files = trusted::list(&ctx.home)?;
    let out: Vec<serde_json::Value> = files
        .iter()
        .map(|(file, t, state)| {
            serde_json::json!({
                "file": file,
                "blake3": t.blake3,
                "trusted_at": t.trusted_at,
                "state": state,
            })
        })
        .collect();
    ctx.out(&out, || {
        if files.is_empty() {
            return "no trusted files (`agentbox trust` in a project trusts its agentbox.yaml)\n"
                .to_owned();
        }
        files
            .iter()
            .map(|(file, t, state)| {
                let state = match state {
                    FileTrust::Trusted => "trusted",
                    FileTrust::Changed { .. } => "changed since (untrusted)",
                    FileTrust::Untrusted => "gone",
                };
                format!(
                    "{}\t{state}\t{}\n",
                    render::path(file),
                    render::time(&t.trusted_at)
                )
            })
            .collect()
    })
}
