//! `agentbox setup`: a loop-mounted btrfs filesystem for the store.

use std::path::PathBuf;

use super::ctx::Ctx;
use crate::args::{parse_size, SetupArgs};
use crate::errors::CliResult;

pub(super) fn setup(ctx: &Ctx, a: SetupArgs) -> CliResult {
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
