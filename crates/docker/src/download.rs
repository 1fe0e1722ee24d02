//! One file out of a container (what `docker cp CONTAINER:PATH -` does), as data: its
//! content only, bounded in size. The engine sends a tar; the name, owner and mode its
//! entry carries are the container's to choose and are never used on this side.

use std::io::{Read, Seek, Write};
use std::path::Path;

use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;

use crate::engine::Engine;
use crate::{DockerError, Result};

/// What the tar around a file adds to it: headers and padding (a long name takes a few
/// blocks more), and the end-of-archive blocks.
const TAR_OVERHEAD: u64 = 64 << 10;

/// What [`Engine::download_file`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Downloaded {
    /// The whole file was written: this many bytes.
    Whole(u64),
    /// The file is larger than the limit; what was written must be discarded.
    TooLarge,
}

impl Engine {
    /// Write the content of the regular file at `path` in container `container` (running
    /// or not) to `dest`, at most `limit` bytes. The engine's tar is spooled in a
    /// temporary file below `spool` and must hold exactly one entry, a regular file (a
    /// directory, a link or a device is refused).
    pub fn download_file(
        &self,
        container: &str,
        path: &str,
        spool: &Path,
        dest: &mut dyn Write,
        limit: u64,
    ) -> Result<Downloaded> {
        let doing = format!("copy {path} out of container {container}");
        let fail = |why: String| DockerError::Engine {
            engine: self.endpoint().shown(),
            doing: doing.clone(),
            why,
        };
        let mut tar = tempfile::tempfile_in(spool)?;
        let bound = limit.saturating_add(TAR_OVERHEAD);
        let options = DownloadFromContainerOptions {
            path: path.to_owned(),
        };
        let over = self.block_on(async {
            let mut body = self
                .docker
                .download_from_container(container, Some(options));
            let mut got: u64 = 0;
            while let Some(piece) = body.next().await {
                let piece = piece.map_err(|e| self.fail(&doing, e))?;
                got = got.saturating_add(piece.len() as u64);
                if got > bound {
                    // Dropping the stream closes the connection: the rest is never read.
                    return Ok::<bool, DockerError>(true);
                }
                tar.write_all(&piece)?;
            }
            Ok(false)
        })?;
        if over {
            return Ok(Downloaded::TooLarge);
        }
        tar.rewind()?;
        let mut archive = tar::Archive::new(tar);
        let mut entries = archive.entries()?;
        let mut entry = entries
            .next()
            .ok_or_else(|| fail("the engine sent an empty archive".into()))??;
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(fail(format!(
                "it is not a regular file (a {:?})",
                entry.header().entry_type()
            )));
        }
        let size = entry.size();
        if size > limit {
            return Ok(Downloaded::TooLarge);
        }
        let copied = std::io::copy(&mut (&mut entry).take(limit), dest)?;
        drop(entry);
        if entries.next().is_some() {
            return Err(fail("the engine sent more than one file".into()));
        }
        Ok(Downloaded::Whole(copied))
    }
}

/// The engine's tar stream as a blocking reader: chunks handed over a bounded channel by
/// the runtime's side (the reader drops them when it ends early).
struct Chunks {
    rx: std::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    cur: bytes::Bytes,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.recv() {
                Ok(chunk) => self.cur = chunk?,
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

impl Engine {
    /// Hand the tar the engine makes of `path` in container `container` (running or not) to
    /// `consume` as it arrives: nothing of it is kept on this side but what `consume`
    /// keeps. What `consume` returns is returned; its error ends the transfer.
    pub fn read_archive<T: Send>(
        &self,
        container: &str,
        path: &str,
        consume: impl FnOnce(&mut dyn Read) -> std::io::Result<T> + Send,
    ) -> Result<T> {
        let doing = format!("read {path} of container {container}");
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<bytes::Bytes>>(16);
        let options = DownloadFromContainerOptions {
            path: path.to_owned(),
        };
        std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut chunks = Chunks {
                    rx,
                    cur: bytes::Bytes::new(),
                };
                consume(&mut chunks)
            });
            self.block_on(async {
                let mut body = self
                    .docker
                    .download_from_container(container, Some(options));
                while let Some(piece) = body.next().await {
                    let piece = piece.map_err(|e| self.fail(&doing, e));
                    let failed = piece.is_err();
                    let item = piece.map_err(|e| std::io::Error::other(e.to_string()));
                    // The reader is done (it stopped early, or failed): stop reading.
                    if tx.send(item).is_err() || failed {
                        break;
                    }
                }
                drop(tx);
            });
            match reader.join() {
                Ok(got) => got.map_err(DockerError::from),
                Err(_) => Err(DockerError::Engine {
                    engine: self.endpoint().shown(),
                    doing: doing.clone(),
                    why: "the reader of the archive panicked".into(),
                }),
            }
        })
    }
}
