//! The one glob matcher: `*` (any run of characters) and `?` (any one) within a single
//! path component or file name. `box.ignore` applies it to each component of a path (with
//! `**` for any depth, see the watcher's ignore set); `git.envPatterns` to file names;
//! [`PathPattern`] to whole relative paths (the store's checkpoint cleanup).

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

/// A pattern over whole paths relative to a root, matched component by component.
///
/// Syntax:
///
/// * Components are separated by `/`; the pattern is anchored at the root, and a leading `/`
///   is optional (`/tmp/x` and `tmp/x` are the same pattern). Empty and `.` components are
///   dropped.
/// * Inside a component, `*` and `?` are globs within that component ([`matches`]); there
///   are no character classes.
/// * `**` as a whole component matches any number of components, zero included:
///   `**/.bash_history` matches `.bash_history` and `home/u/.bash_history`; `a/**/b` matches
///   `a/b` and `a/x/y/b`.
/// * A trailing `**` matches one or more components: `tmp/**` matches everything *inside*
///   `tmp`, not `tmp` itself.
/// * A pattern without `/` that contains a glob (`*.log`) is a name glob at any depth (it
///   means `**/*.log`).
///
/// A pattern matches a path exactly (every component consumed); what a match means for the
/// entries below a matched directory is the caller's business.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    parts: Vec<Part>,
}

/// One component of a compiled [`PathPattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// `**` before another component: zero or more components.
    AnyDepth,
    /// A trailing `**`: one or more components.
    Inside,
    /// A component without globs, compared byte for byte.
    Literal(Vec<u8>),
    /// A component with `*` or `?`.
    Glob(Vec<u8>),
}

impl PathPattern {
    /// Compile `pattern` (syntax in the type's documentation); `None` when it has no
    /// component (`""`, `/`), since it could only name the root.
    pub fn new(pattern: &str) -> Option<PathPattern> {
        let components: Vec<&str> = pattern
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let has_glob = |c: &str| c.contains(['*', '?']);
        let mut parts = Vec::with_capacity(components.len() + 1);
        if let [only] = components.as_slice() {
            if !pattern.contains('/') && has_glob(only) && *only != "**" {
                parts.push(Part::AnyDepth);
            }
        }
        for c in components {
            let part = if c == "**" {
                Part::AnyDepth
            } else if has_glob(c) {
                Part::Glob(c.as_bytes().to_vec())
            } else {
                Part::Literal(c.as_bytes().to_vec())
            };
            // `**/**` is `**`.
            if part == Part::AnyDepth && parts.last() == Some(&Part::AnyDepth) {
                continue;
            }
            parts.push(part);
        }
        if parts.last() == Some(&Part::AnyDepth) {
            parts.pop();
            parts.push(Part::Inside);
        }
        (!parts.is_empty()).then_some(PathPattern { parts })
    }

    /// Whether the pattern matches the path made of `components` (the root is the empty
    /// slice, which no pattern matches).
    pub fn matches(&self, components: &[&[u8]]) -> bool {
        match_parts(&self.parts, components)
    }

    /// Whether some path strictly below `components` could match: false means a walk need
    /// not descend into that directory for this pattern.
    pub fn may_match_below(&self, components: &[&[u8]]) -> bool {
        viable_below(&self.parts, components)
    }
}

fn part_matches(part: &Part, component: &[u8]) -> bool {
    match part {
        Part::Literal(lit) => lit.as_slice() == component,
        Part::Glob(glob) => matches(glob, component),
        Part::AnyDepth | Part::Inside => true,
    }
}

fn match_parts(parts: &[Part], components: &[&[u8]]) -> bool {
    match parts.split_first() {
        None => components.is_empty(),
        Some((Part::AnyDepth, rest)) => {
            (0..=components.len()).any(|skip| match_parts(rest, &components[skip..]))
        }
        Some((Part::Inside, _)) => !components.is_empty(),
        Some((part, rest)) => match components.split_first() {
            Some((c, tail)) => part_matches(part, c) && match_parts(rest, tail),
            None => false,
        },
    }
}

/// Whether `components` followed by at least one more component can match `parts`.
fn viable_below(parts: &[Part], components: &[&[u8]]) -> bool {
    match parts.split_first() {
        // The pattern is used up: nothing longer matches.
        None => false,
        // Every remaining part can take one more component (a glob matches some name).
        Some(_) if components.is_empty() => true,
        Some((Part::AnyDepth, rest)) => {
            (0..=components.len()).any(|skip| viable_below(rest, &components[skip..]))
        }
        Some((Part::Inside, _)) => true,
        Some((part, rest)) => {
            part_matches(part, components[0]) && viable_below(rest, &components[1..])
        }
    }
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

    fn comps(path: &str) -> Vec<&[u8]> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .map(str::as_bytes)
            .collect()
    }

    #[test]
    fn path_patterns_anchor_at_the_root_and_stars_stay_in_one_component() {
        let m = |p: &str, path: &str| {
            super::PathPattern::new(p)
                .expect("a pattern")
                .matches(&comps(path))
        };
        assert!(m("/tmp/x", "tmp/x"));
        assert!(m("tmp/x", "tmp/x"));
        assert!(!m("tmp/x", "a/tmp/x"));
        assert!(m("var/log/*.log", "var/log/a.log"));
        assert!(!m("var/log/*.log", "var/log/sub/a.log"));
        assert!(!m("var/*", "var"));
        assert!(m("*", "var"));
        assert!(
            m("*", "var/x"),
            "a name glob without '/' matches at any depth"
        );
        assert!(m("*.log", "a/b/c.log"));
        assert!(!m("tmp", "tmp/x"), "an exact path matches that path only");
    }

    #[test]
    fn double_stars_match_any_depth_and_a_trailing_one_only_inside() {
        let m = |p: &str, path: &str| {
            super::PathPattern::new(p)
                .expect("a pattern")
                .matches(&comps(path))
        };
        assert!(m("/tmp/**", "tmp/a"));
        assert!(m("/tmp/**", "tmp/a/b/c"));
        assert!(!m("/tmp/**", "tmp"), "the directory itself stays");
        assert!(m("**/.bash_history", ".bash_history"));
        assert!(m("**/.bash_history", "home/u/.bash_history"));
        assert!(m("**/.npm/_logs/**", "root/.npm/_logs/x.log"));
        assert!(!m("**/.npm/_logs/**", "root/.npm/_logs"));
        assert!(m("a/**/b", "a/b"));
        assert!(m("a/**/b", "a/x/y/b"));
        assert!(!m("a/**/b", "a/x/y/c"));
        assert!(m("var/log/**/*.log", "var/log/a.log"));
        assert!(m("var/log/**/*.log", "var/log/apt/term.log"));
        assert!(m("a/**/**/b", "a/b"));
        assert!(m("**", "x/y"));
        assert!(super::PathPattern::new("/").is_none());
        assert!(super::PathPattern::new("./").is_none());
    }

    #[test]
    fn may_match_below_prunes_walks() {
        let below = |p: &str, path: &str| {
            super::PathPattern::new(p)
                .expect("a pattern")
                .may_match_below(&comps(path))
        };
        assert!(below("/tmp/**", ""));
        assert!(below("/tmp/**", "tmp"));
        assert!(below("/tmp/**", "tmp/a"));
        assert!(!below("/tmp/**", "usr"));
        assert!(!below("/var/tmp/**", "var/lib"));
        assert!(below("/var/tmp/**", "var"));
        assert!(!below("tmp/x", "tmp/x"), "nothing below an exact match");
        assert!(below("**/.bash_history", "any/where"));
        assert!(below("a/**/b", "a/x/y"));
        assert!(!below("a/**/b", "c"));
    }
}
