//! A directory of the host's `/` that a test owns, so tests of what a box does to its base
//! (deleting a base file, replacing a base directory) do not depend on what the machine
//! happens to have under `/usr`, `/etc` or `/var` (root only: it writes to the host's `/`).
//! It is in `/usr/local`, which a box sees (the base is an allow-list of system paths), and
//! readable by every user (a box does not see what others may not read).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const PARENT: &str = "/usr/local";

/// `/usr/local/agentbox-fixture-<unique>/` holding `file` and `tree/` (`DIRS` directories of
/// `FILES` files each, deep enough that removing it makes overlayfs copy up and whiteout
/// many entries). Removed on drop, with `/usr/local` itself when the fixture created it.
pub struct BaseFixture {
    dir: PathBuf,
    created_parent: bool,
}

impl BaseFixture {
    /// Directories under `tree/`.
    pub const DIRS: usize = 200;
    /// Files in each of them.
    pub const FILES: usize = 5;

    pub fn new() -> BaseFixture {
        let parent = Path::new(PARENT);
        let created_parent = !parent.exists();
        std::fs::create_dir_all(parent).expect("create /usr/local");
        let dir = tempfile::Builder::new()
            .prefix("agentbox-fixture-")
            .tempdir_in(parent)
            .expect("create the base fixture")
            .keep();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .expect("make the base fixture readable");
        std::fs::write(dir.join("file"), "base file\n").expect("write the base file");
        for d in 0..Self::DIRS {
            let sub = dir.join(format!("tree/d{d:02}/inner"));
            std::fs::create_dir_all(&sub).expect("create a fixture directory");
            for f in 0..Self::FILES {
                std::fs::write(sub.join(format!("f{f}")), format!("{d}/{f}\n"))
                    .expect("write a fixture file");
            }
        }
        BaseFixture {
            dir,
            created_parent,
        }
    }

    /// The fixture's path, as the host and a box on the host's `/` see it.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The fixture's path as a string, for shell scripts.
    pub fn display(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }
}

impl Default for BaseFixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for BaseFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.created_parent {
            let _ = std::fs::remove_dir(Path::new(PARENT));
        }
    }
}
