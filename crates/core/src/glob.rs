//! The one glob matcher: `*` (any run of characters) and `?` (any one) within a single
//! path component or file name. `box.ignore` applies it to each component of a path (with
//! `**` for any depth, see the watcher's ignore set); `git.envPatterns` to file names.

/// Whether `name` (one path component) matches `pattern`.
pub fn matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_and_question_marks() {
        let m = |p: &str, n: &str| matches(p.as_bytes(), n.as_bytes());
        assert!(m(".env*", ".env"));
        assert!(m(".env*", ".env.local"));
        assert!(m("*.env", "prod.env"));
        assert!(!m("*.env", "prod.envx"));
        assert!(m(".envrc", ".envrc"));
        assert!(!m(".env", ".envrc"));
        assert!(m("*.log", "a.log"));
        assert!(m("?.txt", "a.txt"));
        assert!(!m("?.txt", "ab.txt"));
        assert!(m("a*b*c", "aXXbYYc"));
    }
}
