//! An image as one tar and back (what `docker save` and `docker load` do), streamed between
//! the engine and a file, never held in memory: how a checkpoint's image moves between
//! machines. A save names the image by id, so the tar carries no tag (the side that loads
//! it names it); it is bounded by the caller's limit, and a save that passes it fails and
//! removes its file. A load reports the ids the engine says it loaded; the caller checks
//! the one it expects (the engine itself checks every layer against its digest).

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;

use crate::engine::{is_not_found, Engine};
use crate::upload::{UploadWatch, CHUNK};
use crate::{DockerError, Result};

impl Engine {
    /// Write image `image` (an id) to the new file `dest` as `docker save` does; its size.
    /// More than `max` bytes: an error, and no file.
    pub fn save_image(&self, image: &str, dest: &Path, max: u64) -> Result<u64> {
        let doing = format!("save image {image}");
        let written = (|| -> Result<u64> {
            let mut file = std::io::BufWriter::new(fs_err::File::create_new(dest)?);
            let mut n: u64 = 0;
            self.block_on(async {
                let mut body = self.docker.export_image(image);
                while let Some(piece) = body.next().await {
                    let piece = piece.map_err(|e| {
                        if is_not_found(&e) {
                            DockerError::ImageMissing {
                                engine: self.endpoint().shown(),
                                image: image.to_owned(),
                            }
                        } else {
                            self.fail(&doing, e)
                        }
                    })?;
                    n += piece.len() as u64;
                    if n > max {
                        return Err(DockerError::Engine {
                            engine: self.endpoint().shown(),
                            doing: doing.clone(),
                            why: format!("the image is larger than the limit of {max} bytes"),
                        });
                    }
                    file.write_all(&piece)?;
                }
                Ok::<_, DockerError>(())
            })?;
            file.into_inner()
                .map_err(|e| std::io::Error::other(format!("{doing}: {}", e.error())))?
                .sync_all()?;
            Ok(n)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(dest);
        }
        written
    }

    /// Load the images of the `docker save` tar `src` (streamed to the engine); the image
    /// ids (`sha256:…`) and names (`repo:tag`) the engine says it loaded, as it says them.
    pub fn load_images(&self, src: &Path) -> Result<Vec<String>> {
        let file = fs_err::File::open(src)?;
        let shown = src.to_path_buf();
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
        let doing = format!("load the images of {}", src.display());
        let watch = UploadWatch::new(self);
        let docker = self.docker.clone().with_timeout(Duration::MAX);
        let options = bollard::query_parameters::ImportImageOptions {
            quiet: true,
            ..Default::default()
        };
        let mut loaded = Vec::new();
        self.block_on(self.follow_upload(
            &watch,
            docker.import_image_stream(options, watch.track(body), None),
            &doing,
            |step| {
                if let Some(said) = &step.stream {
                    loaded.extend(loaded_names(said));
                }
                step.error_detail.and_then(|d| d.message)
            },
        ))?;
        Ok(loaded)
    }
}

/// The ids and names in what a load said (`Loaded image ID: sha256:…`, `Loaded image:
/// repo:tag`, one a line).
fn loaded_names(said: &str) -> Vec<String> {
    said.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("Loaded image ID: ")
                .or_else(|| l.trim().strip_prefix("Loaded image: "))
        })
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ids_and_names_a_load_reports_are_read_from_its_lines() {
        assert_eq!(
            loaded_names("Loaded image ID: sha256:abc\nLoaded image: r:t\nother\n"),
            ["sha256:abc", "r:t"]
        );
        assert!(loaded_names("").is_empty());
    }
}
