//! Part of a file in a container (running or not), as data: its size first (the engine's
//! stat of the path, no transfer), then the bytes from an offset, bounded — what a reader
//! following a growing file (a process's log) needs. The engine resolves the path inside
//! the container's root; on this side the tar it sends is only read, and only a regular
//! file's content is taken from it.

use std::io::Read;

use bollard::query_parameters::ContainerArchiveInfoOptions;

use crate::engine::{is_not_found, Engine};
use crate::{DockerError, Result};

impl Engine {
    /// The size of the file at `path` in container `container`; `None` when there is
    /// nothing at that path.
    pub fn file_size(&self, container: &str, path: &str) -> Result<Option<u64>> {
        let options = ContainerArchiveInfoOptions {
            path: path.to_owned(),
        };
        match self.block_on(
            self.docker
                .get_container_archive_info(container, Some(options)),
        ) {
            Ok(stat) => Ok(Some(u64::try_from(stat.size).unwrap_or(0))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.fail(&format!("stat {path} in container {container}"), e)),
        }
    }

    /// Up to `max` bytes of the regular file at `path` in container `container` from byte
    /// `offset` (none at or past its end); `None` when there is nothing at that path. What
    /// comes before `offset` passes through and is dropped; the transfer stops after
    /// `max` bytes.
    pub fn read_range(
        &self,
        container: &str,
        path: &str,
        offset: u64,
        max: usize,
    ) -> Result<Option<Vec<u8>>> {
        let Some(size) = self.file_size(container, path)? else {
            return Ok(None);
        };
        if size <= offset || max == 0 {
            return Ok(Some(Vec::new()));
        }
        let doing = format!("read {path} of container {container}");
        let got = self.read_archive(container, path, |tar| {
            let mut archive = tar::Archive::new(tar);
            let mut entries = archive.entries()?;
            let Some(entry) = entries.next() else {
                return Ok(Err("the engine sent an empty archive".to_owned()));
            };
            let mut entry = entry?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                return Ok(Err(format!(
                    "it is not a regular file (a {:?})",
                    entry.header().entry_type()
                )));
            }
            std::io::copy(&mut (&mut entry).take(offset), &mut std::io::sink())?;
            let mut out = Vec::new();
            (&mut entry).take(max as u64).read_to_end(&mut out)?;
            Ok(Ok(out))
        });
        match got {
            Ok(Ok(bytes)) => Ok(Some(bytes)),
            Ok(Err(why)) => Err(DockerError::Engine {
                engine: self.endpoint().shown(),
                doing,
                why,
            }),
            Err(e) => Err(e),
        }
    }
}
