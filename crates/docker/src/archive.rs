//! Files into a container: a tar unpacked into one of its directories (what `docker cp`
//! does), streamed so that the engine may be remote.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::UploadToContainerOptions;

use crate::engine::Engine;
use crate::upload::{UploadWatch, CHUNK};
use crate::Result;

impl Engine {
    /// Unpack the tar file `tar` into directory `dir` of container `container` (running or
    /// not; `dir` must exist there). Entries keep the owners and modes the tar gives them.
    pub fn upload_tar(&self, container: &str, dir: &str, tar: &Path) -> Result<()> {
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
        let options = UploadToContainerOptions {
            path: dir.to_owned(),
            ..Default::default()
        };
        let watch = UploadWatch::new(self);
        let body = bollard::body_try_stream(watch.track(body));
        // The upload's own watch bounds it, not the request timeout.
        let docker = self.docker.clone().with_timeout(Duration::MAX);
        let doing = format!("copy {} into {dir} of", tar.display());
        self.block_on(async {
            tokio::select! {
                done = docker.upload_to_container(container, Some(options), body) => {
                    done.map_err(|e| self.missing_or(container, &doing, e))
                }
                why = watch.expired() => Err(crate::DockerError::Engine {
                    engine: self.endpoint().shown(),
                    doing: format!("{doing} container {container}"),
                    why,
                }),
            }
        })
    }
}
