//! Box-wins for untracked files: a box booted from a checkpoint may have files of its own
//! where the host's untracked files would land; the provider finds which (in the box) and
//! the shipment leaves them out, so the box's version stays and the collision is reported.

use std::collections::BTreeSet;

use super::Shipment;
use crate::{GitError, Result};

impl Shipment {
    /// Rewrite `files_tar` without the paths in `present` (those the box has already; found
    /// by the provider among [`Shipment::files`]); the paths left out, in order. Nothing is
    /// rewritten when none of `files` is present.
    pub fn leave_out(&mut self, present: &BTreeSet<String>) -> Result<Vec<String>> {
        let (out, kept): (Vec<String>, Vec<String>) = self
            .files
            .iter()
            .cloned()
            .partition(|f| present.contains(f));
        if out.is_empty() {
            return Ok(out);
        }
        let fail = |e: std::io::Error| GitError::Ship {
            repo: self.repo.clone(),
            box_name: self.name.clone(),
            what: "leave the box's own files out".into(),
            message: e.to_string(),
        };
        let next = self.files_tar.with_extension("tar.next");
        let bytes = (|| {
            let mut from = tar::Archive::new(fs_err::File::open(&self.files_tar)?);
            let mut to = tar::Builder::new(std::io::BufWriter::new(fs_err::File::create(&next)?));
            for entry in from.entries()? {
                let mut entry = entry?;
                let path = entry.path()?.to_string_lossy().into_owned();
                if present.contains(&path) {
                    continue;
                }
                let mut header = entry.header().clone();
                // Long names and link targets travel in extension entries the reader has
                // folded in: write them again from the entry's own.
                if header.entry_type().is_symlink() {
                    let target = entry.link_name()?.unwrap_or_default().into_owned();
                    to.append_link(&mut header, &path, target)?;
                } else {
                    to.append_data(&mut header, &path, &mut entry)?;
                }
            }
            let out = to.into_inner()?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            Ok(file.metadata()?.len())
        })()
        .map_err(fail)?;
        fs_err::rename(&next, &self.files_tar).map_err(fail)?;
        self.files_tar_bytes = bytes;
        self.files = kept;
        self.seeded.untracked = self.files.len();
        Ok(out)
    }
}
