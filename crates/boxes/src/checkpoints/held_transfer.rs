//! Moving a checkpoint whose tree its provider holds (a Docker checkpoint: an image on an
//! engine) between agentbox homes as one file, beside [`crate::checkpoints::transfer`]'s
//! store checkpoints.
//!
//! Format: a plain tar holding exactly two members, in this order:
//!
//! 1. `agentbox-checkpoint.json` — the checkpoint's [`Manifest`] (at most
//!    [`crate::checkpoints::transfer::MAX_MANIFEST`] bytes), its `held` naming the image by id;
//! 2. `image.tar` — that image as its provider saves it (`docker save` of the id: every
//!    layer, no tag), at most the import's size limit.
//!
//! An import stages the image file on the host (bounded), has the provider check and load
//! it where the project's boxes run, named for the *target* project
//! ([`Provider::load_checkpoint_tree`]), then records a node naming the image kept by the
//! checkpoint's ref, then the manifest. Any failure removes what was made (the image's
//! name on the engine, the ref, the staging files): nothing is half-written.

use std::io::Write;
use std::path::Path;

use agentbox_core::atomic::write_json;
use agentbox_store::derive::DetachOpts;
use agentbox_store::{DetachedHow, Held};

use crate::checkpoints::checkpoint::{lock, manifest_path, project_key, ref_name, Checkpoint};
use crate::checkpoints::checkpoint::{HeldCheckpoint, Manifest};
use crate::checkpoints::transfer::{
    bad, Exported, DEFAULT_MAX_IMAGE, IMAGE_MEMBER, MANIFEST_MEMBER,
};
use crate::facade::Boxes;
use crate::provider::Provider;
use crate::{BoxError, Result};

impl Boxes {
    /// `checkpoint export` of checkpoint `c`, held as `held`: its manifest and its image
    /// in one file `output` (written beside it, then renamed into place).
    pub(crate) fn checkpoint_export_held(
        &self,
        c: &Checkpoint,
        held: &HeldCheckpoint,
        output: &Path,
    ) -> Result<Exported> {
        let m = &c.manifest;
        let provider = self.held_provider(output, m)?;
        let store = self.store()?;
        let image = agentbox_store::transfer::staging(store, "checkpoint-export-image")?;
        let partial = output.with_file_name(format!(
            ".{}.partial-{}",
            output
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let written = (|| -> Result<u64> {
            provider.save_checkpoint_tree(m.project.as_deref(), held, &image, DEFAULT_MAX_IMAGE)?;
            let manifest = serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?;
            let file = fs_err::File::create(&partial)?;
            let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
            let mut header = tar::Header::new_gnu();
            header.set_size(manifest.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(m.created.timestamp().max(0) as u64);
            header.set_cksum();
            tar.append_data(&mut header, MANIFEST_MEMBER, manifest.as_slice())?;
            tar.append_path_with_name(&image, IMAGE_MEMBER)?;
            let mut w = tar.into_inner()?;
            w.flush()?;
            w.into_inner()
                .map_err(|e| std::io::Error::other(e.error().to_string()))?
                .sync_all()?;
            let bytes = fs_err::metadata(&partial)?.len();
            fs_err::rename(&partial, output)?;
            Ok(bytes)
        })();
        let _ = std::fs::remove_file(&image);
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

    /// The import of file `source`'s held checkpoint `m` as checkpoint `name` of `project`,
    /// its image staged in `image` (see the module's documentation). Names are checked.
    pub(crate) fn checkpoint_import_held(
        &self,
        source: &Path,
        project: Option<&Path>,
        name: String,
        mut m: Manifest,
        image: &Path,
    ) -> Result<Checkpoint> {
        let from = m
            .held
            .clone()
            .ok_or_else(|| bad(source, "its manifest names no image"))?;
        let provider = self.held_provider(source, &m)?;
        let store = self.store_or_init(None)?;
        let _lock = lock(self.home(), project)?;
        let full_ref = ref_name(project, &name);
        if store.get_ref(&full_ref)?.is_some() || self.checkpoint(project, &name).is_ok() {
            return Err(BoxError::CheckpointExists { name });
        }
        let held = provider.load_checkpoint_tree(
            project,
            &project_key(project),
            &name,
            image,
            &from.image_id,
        )?;
        let tmp_env = format!("ckpt-import-{}", agentbox_core::id::new_id());
        let made = (|| -> Result<()> {
            let object = Held {
                by: provider.kind().to_owned(),
                object: held.image_id.clone(),
            };
            let message = format!("checkpoint {name} (imported)");
            store.create_held_env(&tmp_env, object.clone(), &message)?;
            let node = store.detach_held(
                &tmp_env,
                "HEAD",
                object,
                DetachedHow::Derive,
                DetachOpts::new(&full_ref, message),
            )?;
            m.name = name.clone();
            m.project = project.map(Path::to_owned);
            m.node = node.id.into_string();
            m.held = Some(held.clone());
            if let Err(e) = write_json(&manifest_path(self.home(), project, &m.name), &m) {
                let _ = store.set_ref(&full_ref, None);
                return Err(e.into());
            }
            Ok(())
        })();
        if store.env(&tmp_env).is_ok() {
            // Its node names the image too: GC releases it, and `prune` keeps an image a
            // node of the checkpoint still names.
            let _ = store.remove_env(&tmp_env);
        }
        if let Err(e) = made {
            let _ = provider.remove_checkpoint_tree(project, &held);
            return Err(e);
        }
        self.checkpoint(project, &name)
    }

    /// The provider holding checkpoint `m` (of file `file`).
    fn held_provider(&self, file: &Path, m: &Manifest) -> Result<&dyn Provider> {
        self.provider_named(m.provider_kind()).ok_or_else(|| {
            bad(
                file,
                format!(
                    "checkpoint {:?} is for the {} provider, which this agentbox does not run",
                    m.name,
                    m.provider_kind()
                ),
            )
        })
    }
}
