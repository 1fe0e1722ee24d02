//! A URL as a box may see it: without its credentials. Agents' configurations and the
//! host's npmrc both name registries and endpoints by URL, with a token in the userinfo or
//! the query as often as not.

/// `url` without its userinfo and its secret-looking query parameters, and what was left
/// out (`userinfo`, `query.NAME`).
pub(crate) fn clean_url(url: &str) -> (String, Vec<String>) {
    let mut removed = Vec::new();
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let host = match authority.rfind('@') {
        Some(i) => {
            removed.push("userinfo".to_owned());
            &authority[i + 1..]
        }
        None => authority,
    };
    let (before_frag, frag) = match tail.find('#') {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    let (path, query) = match before_frag.find('?') {
        Some(i) => (&before_frag[..i], Some(&before_frag[i + 1..])),
        None => (before_frag, None),
    };
    let mut out = format!("{scheme}{host}{path}");
    if let Some(q) = query {
        let kept: Vec<&str> = q
            .split('&')
            .filter(|kv| {
                let name = kv
                    .split('=')
                    .next()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                let secret = SECRET_PARAMS.iter().any(|s| name.contains(s));
                if secret {
                    removed.push(format!("query.{name}"));
                }
                !secret
            })
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    // A fragment never reaches a server, but it can hold a token (OAuth implicit flow).
    if !frag.is_empty() {
        removed.push("fragment".to_owned());
    }
    (out, removed)
}

/// Query parameter names that carry credentials in URLs, matched as parts of the
/// lower-cased name (`access_token`, `X-Api-Key`, `sig`).
const SECRET_PARAMS: &[&str] = &[
    "token",
    "key",
    "secret",
    "passw",
    "auth",
    "sig",
    "credential",
    "session",
    "code",
];
