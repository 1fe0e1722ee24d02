//! What changed in a container's filesystem since its image (`docker diff`).

use crate::engine::Engine;
use crate::Result;

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeKind {
    Modified,
    Added,
    Deleted,
}

/// One path of a container that differs from its image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Change {
    /// Absolute, as the container sees it (`/workspace/a.txt`).
    pub path: String,
    pub kind: ChangeKind,
}

impl Engine {
    /// The paths of container `container` that differ from its image, sorted. A directory
    /// is listed as modified when something below it changed; a file written again after
    /// a first change is listed as it was (the engine compares with the image only).
    pub fn changes(&self, container: &str) -> Result<Vec<Change>> {
        use bollard::models::ChangeType;
        let list = self
            .block_on(self.docker.container_changes(container))
            .map_err(|e| self.missing_or(container, "list the changes of", e))?
            .unwrap_or_default();
        let mut out: Vec<Change> = list
            .into_iter()
            .map(|c| Change {
                path: c.path,
                kind: match c.kind {
                    ChangeType::_0 => ChangeKind::Modified,
                    ChangeType::_1 => ChangeKind::Added,
                    ChangeType::_2 => ChangeKind::Deleted,
                },
            })
            .collect();
        out.sort();
        Ok(out)
    }
}
