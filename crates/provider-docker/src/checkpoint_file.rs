//! A Docker checkpoint's image moved between engines as a file (`checkpoint export` /
//! `checkpoint import`, see `agentbox_boxes::checkpoints::held_transfer`): saved by id
//! through the engine (`docker save`: every layer, no tag), loaded through the target
//! engine (`docker load`) after the tar is checked on the host, then named
//! `agentbox-ckpt-<project key>:<name>` there.
//!
//! The check before a load: the tar's `manifest.json` (at most [`MAX_INDEX`] bytes) lists
//! exactly one image, whose configuration is the id the checkpoint's manifest records, and
//! no tag — a file that would name images on the engine (`ubuntu:latest`, say) is refused
//! before anything reaches it. After the load, the engine must have that id (it checked
//! each layer against its digest). A failure removes what the import made on the engine:
//! the tag, and the image unless the engine had it before.

use std::io::Read;
use std::path::Path;

use agentbox_boxes::provider::HeldCheckpoint;
use agentbox_boxes::{BoxError, Result};

use crate::errors::remote;
use crate::names;
use crate::provider::DockerProvider;

/// The most a saved image's `manifest.json` may hold.
pub const MAX_INDEX: u64 = 1 << 20;

fn bad(path: &Path, why: impl Into<String>) -> BoxError {
    BoxError::Store(agentbox_store::Error::Bundle {
        path: path.to_owned(),
        message: why.into(),
    })
}

/// Save checkpoint `held`'s image (of project `project`) to the new file `dest`, at most
/// `max` bytes; its size.
pub fn save(
    p: &DockerProvider,
    project: Option<&Path>,
    held: &HeldCheckpoint,
    dest: &Path,
    max: u64,
) -> Result<u64> {
    let engine = p.engine(held.engine.as_deref(), project)?;
    engine.save_image(&held.image_id, dest, max).map_err(remote)
}

/// Load the saved image `src` on project `project`'s engine as checkpoint `name` of the
/// project whose key is `project_key`, after checking it holds image `image_id` only (see
/// the module's documentation).
pub fn load(
    p: &DockerProvider,
    project: Option<&Path>,
    project_key: &str,
    name: &str,
    src: &Path,
    image_id: &str,
) -> Result<HeldCheckpoint> {
    crate::checkpoint::check_tag(name)?;
    check_saved(src, image_id)?;
    let engine = p.engine(None, project)?;
    let repo = names::checkpoint_repo(project_key);
    let tag = format!("{repo}:{name}");
    if engine.image(&tag).map_err(remote)?.is_some() {
        return Err(BoxError::CheckpointExists {
            name: name.to_owned(),
        });
    }
    let had = engine.image(image_id).map_err(remote)?.is_some();
    let made = (|| -> Result<()> {
        engine.load_images(src).map_err(remote)?;
        match engine.image(image_id).map_err(remote)? {
            Some(i) if i.id == image_id => {}
            _ => {
                return Err(bad(
                    src,
                    format!("the engine did not load image {image_id} from it"),
                ))
            }
        }
        engine.tag_image(image_id, &repo, name).map_err(remote)
    })();
    if let Err(e) = made {
        let _ = engine.remove_image(&tag);
        if !had {
            let _ = engine.remove_image(image_id);
        }
        return Err(e);
    }
    Ok(HeldCheckpoint {
        engine: None,
        image: tag,
        image_id: image_id.to_owned(),
    })
}

/// Check that the `docker save` tar `src` holds image `image_id` only, with no tag.
fn check_saved(src: &Path, image_id: &str) -> Result<()> {
    let Some(want) = image_id.strip_prefix("sha256:") else {
        return Err(bad(src, format!("{image_id:?} is not an image id")));
    };
    let mut tar = tar::Archive::new(fs_err::File::open(src)?);
    for entry in tar.entries()? {
        let mut entry = entry?;
        if entry.path()?.as_os_str() != "manifest.json" {
            continue;
        }
        let mut text = Vec::new();
        (&mut entry).take(MAX_INDEX + 1).read_to_end(&mut text)?;
        if text.len() as u64 > MAX_INDEX {
            return Err(bad(src, "the saved image's manifest.json is too large"));
        }
        let listed: Vec<SavedImage> = serde_json::from_slice(&text).map_err(|e| {
            bad(
                src,
                format!("the saved image's manifest.json is not valid: {e}"),
            )
        })?;
        let [one] = listed.as_slice() else {
            return Err(bad(
                src,
                format!("it holds {} images, not the checkpoint's one", listed.len()),
            ));
        };
        if !one.repo_tags.as_deref().unwrap_or_default().is_empty() {
            return Err(bad(
                src,
                "its image carries names (a checkpoint's image is saved without any)",
            ));
        }
        // `blobs/sha256/<hex>` (OCI layout) or `<hex>.json` (older engines).
        let config = one.config.rsplit('/').next().unwrap_or_default();
        let config = config.strip_suffix(".json").unwrap_or(config);
        if config != want {
            return Err(bad(
                src,
                format!("its image is sha256:{config}, not the checkpoint's {image_id}"),
            ));
        }
        return Ok(());
    }
    Err(bad(src, "not a saved image (it has no manifest.json)"))
}

/// One image of a saved tar's `manifest.json`.
#[derive(serde::Deserialize)]
struct SavedImage {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(manifest: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("tmp");
        let mut b = tar::Builder::new(f.reopen().expect("reopen"));
        let mut h = tar::Header::new_gnu();
        h.set_size(manifest.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "manifest.json", manifest.as_bytes())
            .expect("append");
        b.finish().expect("finish");
        f
    }

    #[test]
    fn a_saved_image_must_be_the_checkpoints_one_and_untagged() {
        let id = "sha256:abc";
        let ok = saved(r#"[{"Config":"blobs/sha256/abc","RepoTags":null,"Layers":[]}]"#);
        check_saved(ok.path(), id).expect("the checkpoint's image");
        let old = saved(r#"[{"Config":"abc.json","Layers":[]}]"#);
        check_saved(old.path(), id).expect("an older engine's layout");
        for (manifest, why) in [
            (
                r#"[{"Config":"blobs/sha256/abd","Layers":[]}]"#,
                "not the checkpoint's",
            ),
            (
                r#"[{"Config":"blobs/sha256/abc","RepoTags":["ubuntu:latest"]}]"#,
                "carries names",
            ),
            (
                r#"[{"Config":"blobs/sha256/abc"},{"Config":"blobs/sha256/abc"}]"#,
                "holds 2 images",
            ),
            ("{", "not valid"),
        ] {
            let f = saved(manifest);
            let e = check_saved(f.path(), id).expect_err(manifest).to_string();
            assert!(e.contains(why), "{manifest}: {e}");
        }
    }
}
