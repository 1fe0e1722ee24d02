//! The real credentials the broker puts on a box's requests, and where they come from: the
//! calling shell's environment, else the files saved in the agentbox home's `credentials/`
//! directory (mode 0600; the home is hidden from every box).
//!
//! Invariant: a [`Secret`] never shows in `Debug` output, logs or error messages; its value
//! is read only where a request to the upstream is built ([`Secret::expose`]) and where a
//! saved file is written.

use fs_err::os::unix::fs::OpenOptionsExt;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{BrokerError, Result};

/// The directory of saved credentials in the agentbox home: one file per credential, the
/// value alone (surrounding white space ignored), mode 0600.
pub const CREDENTIALS_DIR: &str = "credentials";
/// A Claude OAuth token: what `agentbox claude login` saves (`claude setup-token`).
pub const CLAUDE_TOKEN_FILE: &str = "claude.token";
/// An Anthropic API key.
pub const ANTHROPIC_KEY_FILE: &str = "anthropic.key";
/// An OpenAI API key.
pub const OPENAI_KEY_FILE: &str = "openai.key";

/// Environment variables holding an Anthropic API key, an Anthropic (Claude) OAuth token
/// and an OpenAI API key, in the calling shell. They win over the saved files.
pub const ANTHROPIC_API_KEY_ENV: &str = "ANTHROPIC_API_KEY";
pub const CLAUDE_OAUTH_TOKEN_ENV: &str = "CLAUDE_CODE_OAUTH_TOKEN";
pub const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// Every variable of the caller's environment that may hold a real credential: none of them
/// may reach a supervisor's environment (and from there its box's first process).
pub const CREDENTIAL_ENV: &[&str] = &[
    ANTHROPIC_API_KEY_ENV,
    CLAUDE_OAUTH_TOKEN_ENV,
    "ANTHROPIC_AUTH_TOKEN",
    OPENAI_API_KEY_ENV,
];

/// A credential's value. Serialises as the plain string (it crosses only the supervisor's
/// host socket); `Debug` hides it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that needs it: the upstream request's header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

/// How the Anthropic API is authenticated: an API key (`x-api-key`) or a Claude OAuth token
/// (`Authorization: Bearer`, what `claude setup-token` makes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "secret", rename_all = "snake_case")]
pub enum AnthropicCredential {
    ApiKey(Secret),
    OauthToken(Secret),
}

/// The real credentials of one broker. Either may be missing: a request to an API without
/// one is answered by the broker itself (503), never forwarded unauthenticated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic: Option<AnthropicCredential>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openai: Option<Secret>,
}

/// Where the agentbox home at `home` keeps saved credentials.
pub fn saved_dir(home: &Path) -> PathBuf {
    home.join(CREDENTIALS_DIR)
}

impl Credentials {
    pub fn is_empty(&self) -> bool {
        self.anthropic.is_none() && self.openai.is_none()
    }

    /// The caller's credentials: this process's environment, else the files saved in the
    /// agentbox home at `home`.
    pub fn from_caller(home: &Path) -> Result<Credentials> {
        Credentials::resolve(|k| std::env::var(k).ok(), &saved_dir(home))
    }

    /// The credentials `env` (a variable's value) names, each falling back to the file
    /// saved in `dir`. An API key wins over an OAuth token from the same source, as the
    /// Anthropic tools do; an empty variable or file counts as unset. A saved file is read
    /// only when the environment does not give its credential.
    pub fn resolve(env: impl Fn(&str) -> Option<String>, dir: &Path) -> Result<Credentials> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(Secret::new);
        let saved = |name: &str| read_saved(&dir.join(name));
        let anthropic = match (env(ANTHROPIC_API_KEY_ENV), env(CLAUDE_OAUTH_TOKEN_ENV)) {
            (Some(k), _) => Some(AnthropicCredential::ApiKey(k)),
            (None, Some(t)) => Some(AnthropicCredential::OauthToken(t)),
            (None, None) => match saved(ANTHROPIC_KEY_FILE)? {
                Some(k) => Some(AnthropicCredential::ApiKey(k)),
                None => saved(CLAUDE_TOKEN_FILE)?.map(AnthropicCredential::OauthToken),
            },
        };
        let openai = match env(OPENAI_API_KEY_ENV) {
            Some(k) => Some(k),
            None => saved(OPENAI_KEY_FILE)?,
        };
        Ok(Credentials { anthropic, openai })
    }

    /// Save these credentials in the agentbox home at `home` (each one given replaces its
    /// file atomically; the others are left as they are).
    pub fn save(&self, home: &Path) -> Result<()> {
        let dir = saved_dir(home);
        match &self.anthropic {
            Some(AnthropicCredential::ApiKey(k)) => write_private(&dir, ANTHROPIC_KEY_FILE, k)?,
            Some(AnthropicCredential::OauthToken(t)) => write_private(&dir, CLAUDE_TOKEN_FILE, t)?,
            None => {}
        }
        if let Some(k) = &self.openai {
            write_private(&dir, OPENAI_KEY_FILE, k)?;
        }
        Ok(())
    }
}

/// The saved credential at `path` (`None`: there is none, or it is empty). One that others
/// may read is refused: its secret may have leaked, and silently using it would hide that.
fn read_saved(path: &Path) -> Result<Option<Secret>> {
    let meta = match fs_err::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BrokerError::Io(e)),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(BrokerError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    let text = fs_err::read_to_string(path)?;
    Ok(Some(text.trim()).filter(|t| !t.is_empty()).map(Secret::new))
}

/// Replace `dir/name` by `secret` through a temporary file that is mode 0600 from its
/// creation (never briefly readable by others), synced, then renamed over it.
fn write_private(dir: &Path, name: &str, secret: &Secret) -> Result<()> {
    fs_err::create_dir_all(dir)?;
    fs_err::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let mut rand = [0u8; 8];
    getrandom::fill(&mut rand)
        .map_err(|e| BrokerError::Io(std::io::Error::other(e.to_string())))?;
    let suffix: String = rand.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".{name}.tmp-{suffix}"));
    let result = (|| -> Result<()> {
        let mut f = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(secret.expose().as_bytes())?;
        f.sync_all()?;
        fs_err::rename(&tmp, dir.join(name))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs_err::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_wins_over_the_saved_file_and_keys_over_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let saved = Credentials {
            anthropic: Some(AnthropicCredential::OauthToken(Secret::new("file-oauth"))),
            openai: Some(Secret::new("file-openai")),
        };
        saved.save(dir.path()).expect("save");
        let file = saved_dir(dir.path());
        let mode = fs_err::metadata(file.join(CLAUDE_TOKEN_FILE))
            .expect("stat")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            Credentials::resolve(env_of(&[]), &file).expect("resolve"),
            saved
        );
        let c = Credentials::resolve(
            env_of(&[
                ("CLAUDE_CODE_OAUTH_TOKEN", "env-oauth"),
                ("ANTHROPIC_API_KEY", "env-key"),
                ("OPENAI_API_KEY", ""),
            ]),
            &file,
        )
        .expect("resolve");
        assert_eq!(
            c.anthropic,
            Some(AnthropicCredential::ApiKey(Secret::new("env-key")))
        );
        assert_eq!(c.openai, Some(Secret::new("file-openai")), "empty is unset");
        assert!(!format!("{c:?}").contains("env-key"), "Debug hides secrets");
    }

    #[test]
    fn a_saved_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = saved_dir(dir.path());
        fs_err::create_dir_all(&file).expect("mkdir");
        let key = file.join(ANTHROPIC_KEY_FILE);
        fs_err::write(&key, "sk-k\n").expect("write");
        fs_err::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = Credentials::resolve(env_of(&[]), &file).expect_err("refused");
        assert!(
            matches!(e, BrokerError::Permissions { mode: 0o644, .. }),
            "{e}"
        );
        assert!(Credentials::resolve(env_of(&[]), &dir.path().join("none"))
            .expect("no file is no credential")
            .is_empty());
    }
}
