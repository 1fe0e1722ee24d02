//! `agentbox import`: an environment from a bundle or rootfs tar.

use super::ctx::Ctx;
use crate::args::{parse_size, ImportArgs};
use crate::errors::CliResult;
use crate::render;

pub(super) fn import(ctx: &Ctx, a: ImportArgs) -> CliResult {
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
