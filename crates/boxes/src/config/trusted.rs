//! The project files the user trusted (`agentbox trust`), as direnv and mise keep them.
//!
//! `<home>/trusted.json` (0600, replaced atomically, under `<home>/trusted.lock`) maps a
//! file's canonical path to the BLAKE3 hash of the exact bytes the user trusted. A file is
//! trusted while its content hashes to that; any change to it — on the host, or in a box
//! whose branch the user merged — makes it untrusted again (with a warning saying it
//! changed). Trust is recorded only on the host: the home is out of every box's reach, and
//! the in-box `agentbox` has no `trust` request.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use agentbox_core::home::Home;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// The file of trusted files in a home.
pub fn store_path(home: &Home) -> PathBuf {
    home.root().join("trusted.json")
}

/// One trusted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedFile {
    /// The BLAKE3 hash of its content when trusted (hex).
    pub blake3: String,
    pub trusted_at: DateTime<Utc>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Store {
    #[serde(default)]
    files: BTreeMap<PathBuf, TrustedFile>,
}

/// Whether a file's content is trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileTrust {
    /// The user trusted exactly this content.
    Trusted,
    /// Never trusted (or the trust was revoked).
    Untrusted,
    /// Trusted once, with a different content.
    Changed { trusted_at: DateTime<Utc> },
}

/// The hash of a file's content, as recorded.
pub fn fingerprint(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn read_store(home: &Home) -> Result<Store, ConfigError> {
    let path = store_path(home);
    let text = match fs_err::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Store::default()),
        Err(source) => return Err(ConfigError::Io { path, source }),
    };
    serde_json::from_str(&text).map_err(|e| ConfigError::TrustStore {
        path,
        why: e.to_string(),
    })
}

/// The key a file is trusted under: its directory made canonical, then its own name. The
/// file itself is never resolved: a project's `agentbox.yaml` that is a symlink to a file
/// the user trusted elsewhere is trusted only as itself (its own path, its own content), so
/// a cloned repository cannot borrow another project's trust by linking to its file.
fn trust_key(path: &Path) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok(fs_err::canonicalize(dir)?.join(name))
}

/// The trust of the file at `path` whose content is `bytes` (read once by the caller, so
/// what is checked is what is used). A path that cannot be made canonical is untrusted.
pub fn check(home: &Home, path: &Path, bytes: &[u8]) -> Result<FileTrust, ConfigError> {
    let Ok(canonical) = trust_key(path) else {
        return Ok(FileTrust::Untrusted);
    };
    let store = read_store(home)?;
    Ok(match store.files.get(&canonical) {
        None => FileTrust::Untrusted,
        Some(t) if t.blake3 == fingerprint(bytes) => FileTrust::Trusted,
        Some(t) => FileTrust::Changed {
            trusted_at: t.trusted_at,
        },
    })
}

/// Change the store under its lock: `change` gets the map of trusted files; it is written
/// back (0600, atomically) when `change` returns true.
fn update<T>(
    home: &Home,
    change: impl FnOnce(&mut BTreeMap<PathBuf, TrustedFile>) -> (bool, T),
) -> Result<T, ConfigError> {
    let path = store_path(home);
    let write_err = |source| ConfigError::Write {
        path: path.clone(),
        source,
    };
    if !home.root().exists() {
        // A home made here is private, as the store makes it.
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home.root())
            .map_err(|source| ConfigError::Io {
                path: home.root().to_owned(),
                source,
            })?;
    }
    let _lock = agentbox_core::lock::FileLock::acquire(
        &home.root().join("trusted.lock"),
        agentbox_core::lock::Mode::Exclusive,
        "the trusted files",
        "agentbox trust",
    )
    .map_err(write_err)?;
    let mut store = read_store(home)?;
    let (changed, out) = change(&mut store.files);
    if changed {
        let mut bytes = serde_json::to_vec_pretty(&store).map_err(|e| ConfigError::TrustStore {
            path: path.clone(),
            why: e.to_string(),
        })?;
        bytes.push(b'\n');
        write_private(&path, &bytes).map_err(|e| write_err(e.into()))?;
    }
    Ok(out)
}

/// Replace `path` with `bytes` atomically, as a file only its owner can read or write
/// (created 0600, so it is never readable by others, not even for a moment).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use fs_err::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".trusted.json{}{}-{}",
        agentbox_core::atomic::TMP_MARKER,
        std::process::id(),
        &agentbox_core::id::new_id()[..8]
    ));
    let result = (|| {
        let mut f = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs_err::rename(&tmp, path)?;
        fs_err::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Trust the file at `path` with its current content `bytes` (read once by the caller,
/// after checking it): returns its canonical path and the record.
pub fn trust(
    home: &Home,
    path: &Path,
    bytes: &[u8],
) -> Result<(PathBuf, TrustedFile), ConfigError> {
    let canonical = trust_key(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        source,
    })?;
    let record = TrustedFile {
        blake3: fingerprint(bytes),
        trusted_at: Utc::now(),
    };
    update(home, |files| {
        files.insert(canonical.clone(), record.clone());
        (true, ())
    })?;
    Ok((canonical, record))
}

/// What [`trust_file`] recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Trusted {
    /// The file's canonical path.
    pub file: PathBuf,
    #[serde(flatten)]
    pub record: TrustedFile,
    /// The keys its `defaults:` block sets as only a trusted file may (looser than the
    /// user's own configuration), now applying.
    pub keys: Vec<&'static str>,
}

/// Trust the project file at `path` as it is now: it must read as a workspace file (a
/// file with an error is refused, never trusted), and the content checked is the content
/// whose hash is recorded.
pub fn trust_file(home: &Home, path: &Path) -> Result<Trusted, ConfigError> {
    let text = super::layers::read_text(path)?.ok_or_else(|| ConfigError::Io {
        path: path.to_owned(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    let (values, _) = super::layers::parse_layer(path, super::Layer::Workspace, &text)?;
    // Compared with the user's layers of the project the file is the workspace file of.
    let root = trust_key(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned));
    let user = super::Config::user_layers(home, root.as_deref())?;
    let keys = values
        .into_iter()
        .filter_map(|(name, v)| {
            let key = super::keys::key(name)?;
            match super::trust::untrusted(key, user.value(name), v) {
                super::trust::Outcome::Apply(_) => None,
                _ => Some(key.name),
            }
        })
        .collect();
    let (file, record) = trust(home, path, text.as_bytes())?;
    Ok(Trusted { file, record, keys })
}

/// Forget the trust of the file at `path` (its canonical path, or the path as given when
/// the file is gone); false when it was not trusted.
pub fn revoke(home: &Home, path: &Path) -> Result<bool, ConfigError> {
    let canonical = trust_key(path).unwrap_or_else(|_| path.to_owned());
    update(home, |files| {
        let removed = files.remove(&canonical).is_some();
        (removed, removed)
    })
}

/// Every trusted file, with whether its content still matches.
pub fn list(home: &Home) -> Result<Vec<(PathBuf, TrustedFile, FileTrust)>, ConfigError> {
    let store = read_store(home)?;
    Ok(store
        .files
        .into_iter()
        .map(|(path, t)| {
            let state = match fs_err::read(&path) {
                Ok(bytes) if fingerprint(&bytes) == t.blake3 => FileTrust::Trusted,
                Ok(_) => FileTrust::Changed {
                    trusted_at: t.trusted_at,
                },
                Err(_) => FileTrust::Untrusted,
            };
            (path, t, state)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_holds_for_the_exact_content_only() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().expect("tempdir");
        let home = Home::at(t.path().join("home"));
        let file = t.path().join("agentbox.yaml");
        std::fs::write(&file, "defaults: {}\n").expect("write");
        let bytes = std::fs::read(&file).expect("read");
        assert_eq!(
            check(&home, &file, &bytes).expect("check"),
            FileTrust::Untrusted
        );
        let (canonical, _) = trust(&home, &file, &bytes).expect("trust");
        assert_eq!(canonical, std::fs::canonicalize(&file).expect("canonical"));
        assert_eq!(
            check(&home, &file, &bytes).expect("check"),
            FileTrust::Trusted
        );
        let mode = std::fs::metadata(store_path(&home))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(home.root())
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "a home made by trust is private");
        // Another spelling of the same file is the same file.
        let dotted = t.path().join(".").join("agentbox.yaml");
        assert_eq!(
            check(&home, &dotted, &bytes).expect("check"),
            FileTrust::Trusted
        );
        assert!(matches!(
            check(&home, &file, b"defaults: {box.network: host}\n").expect("check"),
            FileTrust::Changed { .. }
        ));
        assert_eq!(list(&home).expect("list").len(), 1);
        assert!(revoke(&home, &file).expect("revoke"));
        assert!(!revoke(&home, &file).expect("revoke again"));
        assert_eq!(
            check(&home, &file, &bytes).expect("check"),
            FileTrust::Untrusted
        );
    }

    #[test]
    fn a_symlink_to_a_trusted_file_is_not_trusted() {
        // A cloned repository ships `agentbox.yaml -> ../trusted/agentbox.yaml`: the file it
        // links to is trusted, the link is not.
        let t = tempfile::tempdir().expect("tempdir");
        let home = Home::at(t.path().join("home"));
        let trusted_dir = t.path().join("trusted");
        let cloned = t.path().join("cloned");
        std::fs::create_dir_all(&trusted_dir).expect("mkdir");
        std::fs::create_dir_all(&cloned).expect("mkdir");
        let file = trusted_dir.join("agentbox.yaml");
        std::fs::write(&file, "defaults: {agents.broker: false}\n").expect("write");
        let bytes = std::fs::read(&file).expect("read");
        trust(&home, &file, &bytes).expect("trust");
        let link = cloned.join("agentbox.yaml");
        std::os::unix::fs::symlink("../trusted/agentbox.yaml", &link).expect("symlink");
        assert_eq!(
            check(&home, &link, &bytes).expect("check"),
            FileTrust::Untrusted
        );
        // Trusting the link itself trusts that path (and its content), not the target's.
        let (key, _) = trust(&home, &link, &bytes).expect("trust the link");
        assert_eq!(
            key,
            std::fs::canonicalize(&cloned)
                .expect("canonical")
                .join("agentbox.yaml")
        );
        assert_eq!(
            check(&home, &link, &bytes).expect("check"),
            FileTrust::Trusted
        );
    }

    #[test]
    fn a_damaged_store_is_an_error_naming_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = Home::at(t.path());
        std::fs::write(store_path(&home), "{not json").expect("write");
        let e = check(&home, t.path(), b"").expect_err("damaged");
        assert!(e.to_string().contains("trusted.json"), "{e}");
    }
}
