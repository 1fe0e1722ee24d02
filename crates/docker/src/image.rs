//! Images on an engine: whether one is there, importing a root filesystem as one (what
//! `docker import` does), tags, removal, and the images carrying a label.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::{
    CreateImageOptions, ListImagesOptions, RemoveImageOptions, TagImageOptions,
};

use crate::engine::{is_not_found, Engine};
use crate::upload::{UploadWatch, CHUNK};
use crate::{DockerError, Result};

/// What agentbox reads of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// `sha256:…`
    pub id: String,
    pub tags: Vec<String>,
    pub labels: HashMap<String, String>,
    /// When it was made, in seconds since the epoch (`None`: not said, as by an inspect).
    pub created: Option<i64>,
}

impl Engine {
    /// Image `name` (a tag or an id), or `None` when the engine has none of that name.
    pub fn image(&self, name: &str) -> Result<Option<ImageInfo>> {
        match self.block_on(self.docker.inspect_image(name)) {
            Ok(i) => Ok(Some(ImageInfo {
                id: i.id.unwrap_or_default(),
                tags: i.repo_tags.unwrap_or_default(),
                labels: i.config.and_then(|c| c.labels).unwrap_or_default(),
                created: None,
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.fail(&format!("inspect image {name}"), e)),
        }
    }

    /// Image `name`, or [`DockerError::ImageMissing`].
    pub fn require_image(&self, name: &str) -> Result<ImageInfo> {
        self.image(name)?.ok_or_else(|| DockerError::ImageMissing {
            engine: self.endpoint().shown(),
            image: name.to_owned(),
        })
    }

    /// Import the root filesystem in the tar file `tar` as image `repo:tag`, with the
    /// Dockerfile instructions `changes` (`ENV …`, `CMD …`, `LABEL …`) applied; returns
    /// its id. The tar streams to the engine, so it may be remote, over a link as slow as
    /// it is (see [`crate::upload`]).
    pub fn import_rootfs(
        &self,
        tar: &Path,
        repo: &str,
        tag: &str,
        changes: &[String],
    ) -> Result<String> {
        let file = fs_err::File::open(tar)?;
        let shown = tar.to_path_buf();
        let body = futures_util::stream::unfold(Some(file), move |file| {
            let shown = shown.clone();
            async move {
                let mut f = file?;
                let mut buf = vec![0u8; CHUNK];
                match f.read(&mut buf) {
                    Ok(0) => None,
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(bytes::Bytes::from(buf)), Some(f)))
                    }
                    Err(e) => Some((
                        Err(std::io::Error::new(
                            e.kind(),
                            format!("{}: {e}", shown.display()),
                        )),
                        None,
                    )),
                }
            }
        });
        let options = CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
            changes: changes.to_vec(),
            ..Default::default()
        };
        let doing = format!("import {} as {repo}:{tag}", tar.display());
        let watch = UploadWatch::new(self);
        let body = bollard::body_try_stream(watch.track(body));
        // The upload's own watch bounds it, not the request timeout.
        let docker = self.docker.clone().with_timeout(Duration::MAX);
        self.block_on(self.follow_upload(
            &watch,
            docker.create_image(Some(options), Some(body), None),
            &doing,
            |step| step.error_detail.and_then(|d| d.message),
        ))?;
        Ok(self.require_image(&format!("{repo}:{tag}"))?.id)
    }

    /// Give image `image` the name `repo:tag` too.
    pub fn tag_image(&self, image: &str, repo: &str, tag: &str) -> Result<()> {
        let options = TagImageOptions {
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
        };
        match self.block_on(self.docker.tag_image(image, Some(options))) {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Err(DockerError::ImageMissing {
                engine: self.endpoint().shown(),
                image: image.to_owned(),
            }),
            Err(e) => Err(self.fail(&format!("tag {image} as {repo}:{tag}"), e)),
        }
    }

    /// Remove image name `name` (a tag: the image goes when it was its last name and no
    /// container uses it). `Ok(false)` when there was none; [`DockerError::ImageInUse`]
    /// when the engine keeps it for a container or a child image.
    pub fn remove_image(&self, name: &str) -> Result<bool> {
        let options = RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        match self.block_on(self.docker.remove_image(name, Some(options), None)) {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message,
            }) => Err(DockerError::ImageInUse {
                engine: self.endpoint().shown(),
                image: name.to_owned(),
                why: message,
            }),
            Err(e) => Err(self.fail(&format!("remove image {name}"), e)),
        }
    }

    /// The images carrying label `key=value`.
    pub fn images_labelled(&self, key: &str, value: &str) -> Result<Vec<ImageInfo>> {
        let filters: HashMap<String, Vec<String>> =
            [("label".to_owned(), vec![format!("{key}={value}")])].into();
        let options = ListImagesOptions {
            filters: Some(filters),
            ..Default::default()
        };
        let list = self
            .block_on(self.docker.list_images(Some(options)))
            .map_err(|e| self.fail(&format!("list images labelled {key}={value}"), e))?;
        Ok(list
            .into_iter()
            .map(|i| ImageInfo {
                id: i.id,
                tags: i.repo_tags,
                labels: i.labels,
                created: Some(i.created),
            })
            .collect())
    }
}
