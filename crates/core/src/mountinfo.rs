//! Reading `/proc/self/mountinfo`.

/// Decode the `\040`-style octal escapes mountinfo uses for spaces, tabs, newlines and
/// backslashes; anything else (a lone backslash) is kept as is.
pub fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let value = std::str::from_utf8(&bytes[i + 1..i + 4])
                .ok()
                .filter(|s| s.bytes().all(|b| (b'0'..=b'7').contains(&b)))
                .and_then(|s| u8::from_str_radix(s, 8).ok());
            if let Some(v) = value {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
