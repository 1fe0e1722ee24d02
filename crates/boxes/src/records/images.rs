//! Base images: read-only root filesystems a box can run on instead of the host's `/`.
//!
//! On disk: `<home>/images/<name>/rootfs/` (the tree) and `image.json` (an [`Image`]),
//! written last: an image without it is a half-finished import and is ignored (and
//! replaced by the next import of that name).

use std::path::PathBuf;

use agentbox_core::atomic::{read_json_opt, write_json};
use agentbox_core::home::Home;
use agentbox_store::Store;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{BoxError, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    pub name: String,
    pub imported: DateTime<Utc>,
    /// The tarball (or `-`, or URL) it came from.
    pub source: String,
}

pub fn images_dir(home: &Home) -> PathBuf {
    home.root().join("images")
}

pub fn rootfs(home: &Home, name: &str) -> PathBuf {
    images_dir(home).join(name).join("rootfs")
}

fn record_path(home: &Home, name: &str) -> PathBuf {
    images_dir(home).join(name).join("image.json")
}

/// Image `name`. A name that is not a valid image name (`..`, `/`…: it could only come from
/// a crafted record or checkpoint file) names no image: it is never joined to a path.
pub fn get(home: &Home, name: &str) -> Result<Image> {
    if agentbox_store::names::validate("image", name).is_err() {
        return Err(BoxError::NoSuchImage {
            name: name.to_owned(),
        });
    }
    read_json_opt(&record_path(home, name))?.ok_or_else(|| BoxError::NoSuchImage {
        name: name.to_owned(),
    })
}

pub fn list(home: &Home) -> Result<Vec<Image>> {
    let mut out = Vec::new();
    let Ok(entries) = fs_err::read_dir(images_dir(home)) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(img) = read_json_opt::<Image>(&record_path(home, &name))? {
            out.push(img);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Import a rootfs tarball (`docker export`, an OCI/rootfs tar; file, URL or `-`) as image
/// `name`. Paths that would escape the tree, devices and bad archives are refused, and
/// nothing stays behind on failure.
pub fn import(home: &Home, store: &Store, name: &str, src: &str) -> Result<Image> {
    agentbox_store::names::validate("image", name)?;
    if record_path(home, name).exists() {
        return Err(BoxError::ImageExists { name: name.into() });
    }
    // Held until the image is in place: see `Store::hold`.
    let _staging = store.hold("import an image")?;
    let staged = agentbox_store::transfer::stage_rootfs(store, src)?;
    let dir = images_dir(home).join(name);
    let result = (|| {
        if dir.exists() {
            // A half-finished earlier import.
            store.backend().remove_tree(&dir)?;
        }
        fs_err::create_dir_all(&dir)?;
        fs_err::rename(&staged, dir.join("rootfs"))?;
        let img = Image {
            name: name.to_owned(),
            imported: Utc::now(),
            source: src.to_owned(),
        };
        write_json(&record_path(home, name), &img)?;
        Ok(img)
    })();
    if result.is_err() {
        let _ = store.backend().remove_tree(&staged);
        let _ = store.backend().remove_tree(&dir);
    }
    result
}

/// Remove image `name`; refused while a box uses it.
pub fn remove(home: &Home, store: &Store, name: &str) -> Result<()> {
    get(home, name)?;
    if let Some(b) = crate::records::record::list(home)?
        .into_iter()
        .find(|b| b.image.as_deref() == Some(name))
    {
        return Err(BoxError::ImageInUse {
            name: name.into(),
            by: b.name.into_string(),
        });
    }
    fs_err::remove_file(record_path(home, name))?;
    store.backend().remove_tree(&images_dir(home).join(name))?;
    Ok(())
}
