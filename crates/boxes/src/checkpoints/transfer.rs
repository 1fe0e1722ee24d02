//! Moving a checkpoint between agentbox homes (machines) as one file.
//!
//! Format: a plain tar holding exactly two members, in this order:
//!
//! 1. `agentbox-checkpoint.json` — the checkpoint's [`Manifest`] (at most
//!    [`MAX_MANIFEST`] bytes);
//! 2. `node.agentbox` — a snapshot bundle of the checkpoint's node (see
//!    `docs/bundle-format.md`): its whole tree in one layer, verified on import like any
//!    bundle (checksums, paths that stay inside the tree, devices and setuid bits refused
//!    or stripped, the decompressed-size limit).
//!
//! An import makes the node in the target home's store, names it with the checkpoint ref
//! of the *target* project (the source machine's project path means nothing here), and
//! writes the manifest with that project and node; lineage, source box and times are kept
//! as they were. The ref is written after the node exists and before the manifest; on any
//! error nothing of the import is left but data `gc` frees.
//!
//! A checkpoint whose tree its provider holds (a Docker checkpoint) carries its image
//! instead of the bundle: see [`crate::checkpoints::held_transfer`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use agentbox_core::atomic::write_json;
use agentbox_store::bundle::{BundleKind, Compression};
use agentbox_store::transfer::ImportOptions;
use serde::Serialize;

use crate::checkpoints::checkpoint::{ref_name, Checkpoint, Manifest};
use crate::facade::Boxes;
use crate::{BoxError, Result};

pub(crate) const MANIFEST_MEMBER: &str = "agentbox-checkpoint.json";
const BUNDLE_MEMBER: &str = "node.agentbox";
/// The most a checkpoint file's manifest may hold.
pub const MAX_MANIFEST: u64 = 1 << 20;

/// What `checkpoint export` wrote.
#[derive(Debug, Serialize)]
pub struct Exported {
    pub name: String,
    pub node: String,
    pub output: PathBuf,
    pub bytes: u64,
}

pub(crate) fn bad(path: &Path, why: impl Into<String>) -> BoxError {
    BoxError::Store(agentbox_store::Error::Bundle {
        path: path.to_owned(),
        message: why.into(),
    })
}

/// The second member of a held checkpoint's file.
pub(crate) const IMAGE_MEMBER: &str = "image.tar";

/// The most a held checkpoint's image may weigh in a file, unless the import says.
pub const DEFAULT_MAX_IMAGE: u64 = 64 << 30;

/// Copy a held checkpoint's image (a member of file `source`, `size` bytes as its header
/// says) to the new file `dest`: at most `max` bytes, a member cut short or larger being a
/// bad bundle.
pub(crate) fn stage_image(
    member: &mut impl Read,
    size: u64,
    dest: &Path,
    max: u64,
    source: &Path,
) -> Result<()> {
    let mut out = std::io::BufWriter::new(fs_err::File::create(dest)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut n: u64 = 0;
    loop {
        let got = match member.read(&mut buf) {
            Ok(0) => break,
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(bad(source, format!("its image cannot be read whole: {e}"))),
        };
        n += got as u64;
        if n > max {
            return Err(bad(
                source,
                format!("its image is larger than the limit of {max} bytes (--max-size)"),
            ));
        }
        out.write_all(&buf[..got])
            .map_err(|e| BoxError::from(agentbox_store::Error::from(e).or_no_space(dest)))?;
    }
    out.flush()
        .map_err(|e| BoxError::from(agentbox_store::Error::from(e).or_no_space(dest)))?;
    if n != size {
        return Err(bad(
            source,
            format!("its image cannot be read whole: {n} of {size} bytes"),
        ));
    }
    Ok(())
}

impl Boxes {
    /// Write checkpoint `name` (of `project`, see [`Boxes::find_checkpoint`]) to `output`.
    pub fn checkpoint_export(
        &self,
        project: Option<&Path>,
        name: &str,
        output: &Path,
    ) -> Result<Exported> {
        let c = self.find_checkpoint(project, name)?;
        let m = &c.manifest;
        if let Some(held) = &m.held {
            // Its tree is an image on an engine: the image goes in the file instead.
            return self.checkpoint_export_held(&c, held, output);
        }
        let store = self.store()?;
        let tmp_env = format!("export-{}", agentbox_core::id::new_id());
        store.fork_node(&ref_name(m.project.as_deref(), &m.name), &tmp_env, None)?;
        let bundle = agentbox_store::transfer::staging(store, "checkpoint-export")?;
        let partial = output.with_file_name(format!(
            ".{}.partial-{}",
            output
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let written = (|| -> Result<u64> {
            agentbox_store::transfer::export(
                store,
                &tmp_env,
                "HEAD",
                BundleKind::Snapshot,
                Compression::Zstd,
                &bundle,
            )?;
            let manifest = serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?;
            let file = fs_err::File::create(&partial)?;
            let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
            let mut header = tar::Header::new_gnu();
            header.set_size(manifest.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(m.created.timestamp().max(0) as u64);
            header.set_cksum();
            tar.append_data(&mut header, MANIFEST_MEMBER, manifest.as_slice())?;
            tar.append_path_with_name(&bundle, BUNDLE_MEMBER)?;
            let mut w = tar.into_inner()?;
            w.flush()?;
            let bytes = fs_err::metadata(&partial)?.len();
            fs_err::rename(&partial, output)?;
            Ok(bytes)
        })();
        let _ = store.remove_env(&tmp_env);
        let _ = std::fs::remove_file(&bundle);
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        Ok(Exported {
            name: m.name.clone(),
            node: m.node.clone(),
            output: output.to_owned(),
            bytes: written?,
        })
    }

    /// Make a checkpoint of `project` from file `source` (named `name`, else as it was
    /// named where it was made). Refused when the name is taken, or when its base image is
    /// not in this home.
    pub fn checkpoint_import(
        &self,
        source: &Path,
        project: Option<&Path>,
        name: Option<&str>,
        options: ImportOptions,
    ) -> Result<Checkpoint> {
        let store = self.store_or_init(None)?;
        let bundle = agentbox_store::transfer::staging(store, "checkpoint-import")?;
        let tmp_env = format!("import-{}", agentbox_core::id::new_id());
        let tmp_dir = agentbox_store::transfer::staging(store, "checkpoint-import-dir")?;
        let image = agentbox_store::transfer::staging(store, "checkpoint-import-image")?;
        let result = (|| -> Result<Checkpoint> {
            let mut manifest: Option<Manifest> = None;
            let mut have_bundle = false;
            let mut tar = tar::Archive::new(fs_err::File::open(source)?);
            for entry in tar.entries()? {
                // A file cut short or not a tar is a bad checkpoint file, not an IO failure.
                let mut entry =
                    entry.map_err(|e| bad(source, format!("it cannot be read whole: {e}")))?;
                let path = entry.path()?.into_owned();
                match path.to_str() {
                    Some(MANIFEST_MEMBER) if manifest.is_none() && !have_bundle => {
                        let mut text = Vec::new();
                        (&mut entry).take(MAX_MANIFEST + 1).read_to_end(&mut text)?;
                        if text.len() as u64 > MAX_MANIFEST {
                            return Err(bad(source, "the checkpoint manifest is too large"));
                        }
                        manifest = Some(serde_json::from_slice(&text).map_err(|e| {
                            bad(source, format!("the checkpoint manifest is not valid: {e}"))
                        })?);
                    }
                    Some(IMAGE_MEMBER)
                        if manifest.as_ref().is_some_and(|m| m.held.is_some()) && !have_bundle =>
                    {
                        // A held checkpoint's image, as its provider saved it: staged whole
                        // (bounded), checked and loaded after.
                        let max = options.max_size.unwrap_or(DEFAULT_MAX_IMAGE);
                        let size = entry.header().size()?;
                        stage_image(&mut entry, size, &image, max, source)?;
                        have_bundle = true;
                    }
                    Some(BUNDLE_MEMBER) if manifest.as_ref().is_some_and(|m| m.held.is_none()) && !have_bundle => {
                        let mut out = fs_err::File::create(&bundle)?;
                        std::io::copy(&mut entry, &mut out).map_err(|e| {
                            BoxError::from(agentbox_store::Error::from(e).or_no_space(&bundle))
                        })?;
                        have_bundle = true;
                    }
                    _ => {
                        return Err(bad(
                            source,
                            format!(
                                "unexpected member {:?}: a checkpoint file holds {MANIFEST_MEMBER} then {BUNDLE_MEMBER}",
                                path.display()
                            ),
                        ))
                    }
                }
            }
            let (Some(mut m), true) = (manifest, have_bundle) else {
                return Err(bad(
                    source,
                    "not a checkpoint file (written by `agentbox checkpoint export`)",
                ));
            };
            let name = name.map(str::to_owned).unwrap_or_else(|| m.name.clone());
            agentbox_store::names::validate("checkpoint", &name)?;
            // The manifest is the file's (another machine's, or a box's) text: its names are
            // checked before anything uses them.
            for l in &m.lineage {
                agentbox_store::names::validate("checkpoint", l).map_err(|_| {
                    bad(
                        source,
                        format!("lineage entry {l:?} is not a checkpoint name"),
                    )
                })?;
            }
            if m.held.is_some() {
                return self.checkpoint_import_held(source, project, name, m, &image);
            }
            let _lock = crate::checkpoints::checkpoint::lock(self.home(), project)?;
            if let Some(image) = &m.base.image {
                agentbox_store::names::validate("image", image).map_err(|_| {
                    bad(source, format!("base image {image:?} is not an image name"))
                })?;
                crate::records::images::get(self.home(), image)?;
            }
            let full_ref = ref_name(project, &name);
            if store.get_ref(&full_ref)?.is_some() || self.checkpoint(project, &name).is_ok() {
                return Err(BoxError::CheckpointExists { name });
            }
            let bundle_src = bundle.to_string_lossy().into_owned();
            let report =
                agentbox_store::transfer::import(store, &bundle_src, &tmp_env, &tmp_dir, options)?;
            store.set_ref(&full_ref, Some(&report.head))?;
            m.name = name;
            m.project = project.map(Path::to_owned);
            m.node = report.head.into_string();
            if let Err(e) = write_json(
                &crate::checkpoints::checkpoint::manifest_path(self.home(), project, &m.name),
                &m,
            ) {
                let _ = store.set_ref(&full_ref, None);
                return Err(e.into());
            }
            let made = self.checkpoint(project, &m.name)?;
            Ok(made)
        })();
        if store.env(&tmp_env).is_ok() {
            let _ = store.remove_env(&tmp_env);
        }
        let _ = std::fs::remove_file(&bundle);
        let _ = std::fs::remove_file(&image);
        let _ = std::fs::remove_dir_all(&tmp_dir);
        result
    }
}
