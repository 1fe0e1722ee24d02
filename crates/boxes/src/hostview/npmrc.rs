//! The host user's `~/.npmrc` in a box: its settings, never its credentials. The file itself
//! stays hidden ([`super::HOME_SECRETS`]); a copy filtered by an **allow-list** of keys
//! known to carry no credential ([`SAFE_KEYS`], and `@scope:registry`) is given to npm in
//! the box as its global configuration (`npm_config_globalconfig`), so the box's own
//! `~/.npmrc` (what `npm config set` writes there) is the box's and wins over it.
//!
//! Invariants: a line is kept only when its key is on the list, its value is plain text
//! (no quote, escape or comment character left after npm's `ini` reading) naming no
//! credential or variable, and it comes before any `[section]`; a URL loses its user,
//! password and credential-like query parameters. Everything else is dropped and named by
//! its key (never its value). Comments are dropped.

use super::url::clean_url;

/// The file's name in the box's inbox (seen read-only in the box at
/// `/run/agentbox/ctl/host-npmrc`).
pub const NPMRC_FILE: &str = "host-npmrc";

/// npm settings that carry no credential and name no host path, compared without case.
/// Not listed, so dropped: every `//host/:_authToken`-style key, `_auth`, `username`,
/// `_password`, `email`, `cert`, `key`, `certfile`, `keyfile`, `cafile`, `ca`, `cache`,
/// `prefix`, `userconfig`, `globalconfig`, `init-module`, `script-shell`, `node-options`,
/// `proxy`, `https-proxy`, and any key npm adds later.
const SAFE_KEYS: &[&str] = &[
    "registry",
    "update-notifier",
    "fund",
    "audit",
    "audit-level",
    "progress",
    "loglevel",
    "color",
    "unicode",
    "save",
    "save-exact",
    "save-prefix",
    "engine-strict",
    "strict-ssl",
    "strict-peer-deps",
    "legacy-peer-deps",
    "prefer-offline",
    "prefer-online",
    "offline",
    "fetch-retries",
    "fetch-retry-factor",
    "fetch-retry-mintimeout",
    "fetch-retry-maxtimeout",
    "fetch-timeout",
    "maxsockets",
    "package-lock",
    "lockfile-version",
    "ignore-scripts",
    "install-strategy",
    "omit",
    "init-author-name",
    "init-author-url",
    "init-license",
    "init-version",
];

/// Keys whose value is a URL (cleaned of credentials, and only `http(s)://`).
const URL_KEYS: &[&str] = &["registry", "init-author-url"];

/// Parts of a value (lower-cased) that name a credential or a variable: such a line is
/// dropped whatever its key.
const SECRET_VALUE_PARTS: &[&str] = &["_auth", "_password", "password", "token", "secret", "${"];

/// A filtered `.npmrc`: the text for the box, and the keys left out (never their values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Npmrc {
    pub text: String,
    pub dropped: Vec<String>,
}

/// Whether `key` (lower-cased) is `@scope:registry` with a scope of npm's name characters.
fn is_scoped_registry(key: &str) -> bool {
    key.strip_prefix('@')
        .and_then(|k| k.strip_suffix(":registry"))
        .is_some_and(|scope| {
            !scope.is_empty()
                && scope
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
        })
}

/// The value of a `key = value` line as npm's `ini` reads it: quotes removed, an inline
/// `;`/`#` comment cut. `None`: a form this filter does not reproduce exactly (escapes,
/// quotes inside), which is dropped rather than guessed at.
fn unquote(raw: &str) -> Option<&str> {
    for q in ['"', '\''] {
        if let Some(inner) = raw.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return (!inner.contains(['"', '\'', '\\'])).then_some(inner);
        }
    }
    if raw.contains(['\\', '"', '\'']) {
        return None;
    }
    Some(raw.split([';', '#']).next().unwrap_or_default().trim())
}

/// Filter the text of the host user's `~/.npmrc` for a box (see the module's invariants).
pub fn filter(text: &str) -> Npmrc {
    filter_keys(text, &[], "~/.npmrc")
}

/// Filter the host's global npmrc the same way, keeping its `cafile` too: a system CA
/// bundle's path (a company's CA, a registry proxy's), without which npm in the box cannot
/// reach the registry. The global file may sit where the box sees nothing (`/opt`), and may
/// hold tokens like any npmrc, so it is not copied whole.
pub fn filter_global(text: &str) -> Npmrc {
    filter_keys(text, &["cafile"], "global npmrc")
}

fn filter_keys(text: &str, extra_keys: &[&str], what: &str) -> Npmrc {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    let mut in_section = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with([';', '#']) {
            continue;
        }
        if line.starts_with('[') {
            // Keys below a section are not npm's top-level settings.
            in_section = true;
            dropped.push(format!("line {} (a section)", n + 1));
            continue;
        }
        let (key, raw, assigned) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim(), true),
            // `key` alone is `key=true` to `ini`.
            None => (line, "true", false),
        };
        let lower = key.to_ascii_lowercase();
        // Named by the key only when it is a plain name: a line without `=` may be a
        // token pasted alone, and `//host/:_authToken=…` is named by its line.
        let name =
            if !assigned || lower.starts_with("//") || !key.chars().all(|c| c.is_ascii_graphic()) {
                format!("line {}", n + 1)
            } else {
                key.to_owned()
            };
        let listed = SAFE_KEYS.contains(&lower.as_str())
            || extra_keys.contains(&lower.as_str())
            || is_scoped_registry(&lower);
        if in_section || !listed {
            dropped.push(name);
            continue;
        }
        let Some(value) = unquote(raw) else {
            dropped.push(name);
            continue;
        };
        let mut value = value.to_owned();
        if URL_KEYS.contains(&lower.as_str()) || lower.ends_with(":registry") {
            if !(value.starts_with("https://") || value.starts_with("http://")) {
                dropped.push(name);
                continue;
            }
            let (clean, removed) = clean_url(&value);
            for part in removed {
                dropped.push(format!("{name} ({part})"));
            }
            value = clean;
        }
        let low_value = value.to_ascii_lowercase();
        let plain = !value.is_empty()
            && !value.contains([';', '#', '"', '\'', '\\', '$'])
            && value.chars().all(|c| c.is_ascii_graphic() || c == ' ');
        if !plain || SECRET_VALUE_PARTS.iter().any(|p| low_value.contains(p)) {
            dropped.push(name);
            continue;
        }
        kept.push(format!("{key}={value}\n"));
    }
    let text = if kept.is_empty() {
        String::new()
    } else {
        format!(
            "; The host's {what} without its credentials (agentbox). The box's own ~/.npmrc wins.\n{}",
            kept.concat()
        )
    };
    Npmrc { text, dropped }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_settings_are_kept_and_credentials_in_every_form_dropped() {
        let host = r#"
; a comment with TOKEN1
# another TOKEN2
registry = https://registry.example.com/
@corp:registry="https://user:TOKEN3@npm.corp.example/repo/?x=1&auth_token=TOKEN4"
Update-Notifier=false
fund = false ; inline TOKEN5
save-exact='true'
legacy-peer-deps
//registry.npmjs.org/:_authToken=TOKEN6
//npm.corp.example/repo/:_authToken = "TOKEN7"
_AUTHTOKEN=TOKEN8
_auth = TOKEN9
_password=TOKEN10
username=TOKEN11
email=TOKEN12@example.com
cert="TOKEN13"
key=TOKEN14
certfile=/home/u/TOKEN15
//registry.npmjs.org/:_auth=${NPM_TOKEN}
init-author-name=${NPM_TOKEN}
loglevel="warn\"TOKEN16"
progress=a_authTOKEN17
cache=/home/u/.npm
"unquoted-key"=TOKEN18
registry=ftp://TOKEN19
[section]
registry=https://TOKEN20/
"#;
        let out = filter(host);
        for n in 1..=20 {
            assert!(
                !out.text.contains(&format!("TOKEN{n}")),
                "TOKEN{n}: {}",
                out.text
            );
            assert!(
                !out.dropped.iter().any(|d| d.contains(&format!("TOKEN{n}"))),
                "TOKEN{n} named: {:?}",
                out.dropped
            );
        }
        assert!(!out.text.contains("user") && !out.text.contains("NPM_TOKEN"));
        let lines: Vec<&str> = out.text.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "registry=https://registry.example.com/",
                "@corp:registry=https://npm.corp.example/repo/?x=1",
                "Update-Notifier=false",
                "fund=false",
                "save-exact=true",
                "legacy-peer-deps=true",
            ]
        );
        for named in [
            "@corp:registry (userinfo)",
            "@corp:registry (query.auth_token)",
            "_AUTHTOKEN",
            "_auth",
            "_password",
            "username",
            "email",
            "cert",
            "key",
            "certfile",
            "init-author-name",
            "loglevel",
            "progress",
            "cache",
            "line 10",
            "line 11",
            "line 20",
            "line 27 (a section)",
        ] {
            assert!(
                out.dropped.iter().any(|d| d == named),
                "{named} not named: {:?}",
                out.dropped
            );
        }
    }

    #[test]
    fn nothing_safe_gives_no_text() {
        let out = filter("//registry.npmjs.org/:_authToken=abc\n");
        assert_eq!(out.text, "");
        assert_eq!(out.dropped, ["line 1"]);
        assert!(is_scoped_registry("@my-org.x:registry"));
        assert!(!is_scoped_registry("@:registry"));
        assert!(!is_scoped_registry("@a/b:registry"));
    }

    #[test]
    fn the_global_npmrc_keeps_its_cafile_and_loses_its_tokens() {
        let out = filter_global(
            "cafile=/etc/ssl/certs/ca.pem\n//registry.npmjs.org/:_authToken=sekrit\n\
             _auth=c2Vrcml0\nnodedir=/usr\nregistry=https://u:sekrit@r.example/\n",
        );
        assert!(
            out.text.contains("cafile=/etc/ssl/certs/ca.pem\n"),
            "{}",
            out.text
        );
        assert!(
            out.text.contains("registry=https://r.example/\n"),
            "{}",
            out.text
        );
        assert!(
            !out.text.contains("sekrit") && !out.text.contains("c2Vy"),
            "{}",
            out.text
        );
        // The user's file gets no cafile (a path of the host user's, not the system's).
        assert!(!filter("cafile=/home/u/ca.pem\n").text.contains("cafile"));
    }
}
