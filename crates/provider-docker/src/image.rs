//! The image a box starts from: `box.image`, which must be on the engine already (nothing
//! is pulled), or one built from a Dockerfile and tagged `agentbox-image:<fingerprint>`
//! (see [`agentbox_docker::image_build`]: the tag changes exactly when what the build can
//! see changes, so an unchanged Dockerfile and context are built once per engine).

use std::path::Path;

use agentbox_boxes::progress::Progress;
use agentbox_boxes::provider::NewBox;
use agentbox_boxes::{BoxError, Result};
use agentbox_docker::Engine;

use crate::errors::remote;
use crate::names;
use crate::provider::DockerProvider;

/// The image new box `new` starts from: `--dockerfile`'s, else `box.image`.
pub fn base(
    p: &DockerProvider,
    engine: &Engine,
    new: &NewBox<'_>,
    progress: &dyn Progress,
) -> Result<String> {
    if let Some(dockerfile) = new.dockerfile {
        return build(p, engine, dockerfile, progress);
    }
    let Some(image) = new.options.image.clone() else {
        return Err(BoxError::BadSetting {
            key: "box.image".into(),
            given: String::new(),
            reason: "a box of the docker provider needs an image: --image IMG (on the engine already) or --dockerfile F".into(),
        });
    };
    engine.require_image(&image).map_err(remote)?;
    Ok(image)
}

/// The image `dockerfile` builds (its directory being the build context), built on
/// `engine` unless its fingerprint tag is there already; its name.
pub fn build(
    p: &DockerProvider,
    engine: &Engine,
    dockerfile: &Path,
    progress: &dyn Progress,
) -> Result<String> {
    let context = dockerfile
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let ctx = agentbox_docker::image_build::pack(context, dockerfile).map_err(remote)?;
    let name = format!("{}:{}", names::BUILT_REPO, ctx.fingerprint);
    if engine.image(&name).map_err(remote)?.is_some() {
        return Ok(name);
    }
    let labels = [(names::HOME_LABEL.to_owned(), names::home_key(&p.home))].into();
    progress.busy(&format!("building {name}"), &mut || {
        engine
            .build_image(
                &ctx,
                names::BUILT_REPO,
                &ctx.fingerprint,
                &labels,
                &mut |_| {},
            )
            .map(|_| ())
            .map_err(remote)
    })?;
    Ok(name)
}
