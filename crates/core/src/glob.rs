//! The one glob matcher: `*` (any run of characters) and `?` (any one) within a single
//! path component or file name. `box.ignore` applies it to each component of a path (with
//! `**` for any depth, see the watcher's ignore set); `git.envPatterns` to file names;
//! [`PathPattern`] to whole relative paths (the store's checkpoint cleanup).
//!
//! One file (over 600 lines, about 175 of them tests): one matcher, with the path-pattern
//! walk built on it, so every user matches the same way.

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

    /// A [`Cursor`] at the root, for walking a tree one component at a time; `None` for
    /// a pattern too long for one (more than 62 components, counting a trailing `**` as
    /// two): match those with [`PathPattern::matches`].
    pub fn cursor(&self) -> Option<Cursor> {
        (self.tokens() < 64).then(|| self.closure(1))
    }

    /// The cursor after one more component `name` below `at` (a cursor of this pattern).
    pub fn step(&self, at: Cursor, name: &[u8]) -> Cursor {
        let n = self.tokens();
        let mut next = 0u64;
        let mut bits = at.0 & ((1u64 << n) - 1);
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            match self.token(j) {
                Token::AnyDepth => next |= 1 << j,
                Token::AnyOne => next |= 1 << (j + 1),
                Token::Part(part) => {
                    if part_matches(part, name) {
                        next |= 1 << (j + 1);
                    }
                }
            }
        }
        self.closure(next)
    }

    /// Whether the path walked to `at` matches the pattern ([`PathPattern::matches`]).
    pub fn accepts(&self, at: Cursor) -> bool {
        at.0 & (1 << self.tokens()) != 0
    }

    /// Whether some path strictly below the one walked to `at` could match
    /// ([`PathPattern::may_match_below`]); once false, it stays false for every step.
    pub fn alive(&self, at: Cursor) -> bool {
        at.0 & ((1u64 << self.tokens()) - 1) != 0
    }

    /// The number of positions of the cursor's automaton before its end: the parts, with a
    /// trailing `**` (one or more components) as "any one component" then "any depth".
    fn tokens(&self) -> usize {
        self.parts.len() + usize::from(self.parts.last() == Some(&Part::Inside))
    }

    fn token(&self, j: usize) -> Token<'_> {
        match self.parts.get(j) {
            Some(Part::AnyDepth) | None => Token::AnyDepth,
            Some(Part::Inside) => Token::AnyOne,
            Some(part) => Token::Part(part),
        }
    }

    /// `bits` plus every position reachable from them without a component (`**` matching
    /// zero components). Positions only move forward, so one ascending pass over the set
    /// bits (those added included) suffices; it costs one test per set bit, not per part.
    fn closure(&self, mut bits: u64) -> Cursor {
        let n = self.tokens();
        let mut j = 0;
        while j < n {
            let rest = bits >> j;
            if rest == 0 {
                break;
            }
            j += rest.trailing_zeros() as usize;
            if j < n && matches!(self.token(j), Token::AnyDepth) {
                bits |= 1 << (j + 1);
            }
            j += 1;
        }
        Cursor(bits)
    }
}

/// Several [`PathPattern`]s walked down a tree together, for finding the few paths of a
/// large tree (or listing) that any of them matches.
///
/// A walk holds one [`SetState`] per directory: the cursors of the patterns still alive
/// below it. Most states deep in a tree are *stable*: every name that matches none of
/// their literal or glob parts leaves them as they are (`**/.env` under `node_modules/`
/// stays `**/.env` for `index.js`). Stepping a stable state with such a name costs a few
/// byte comparisons and returns the same state, so a walk costs about one comparison per
/// entry and alive pattern, and new states are made only where a name matches a part.
#[derive(Debug)]
pub struct PatternWalk<'p> {
    patterns: Vec<&'p PathPattern>,
    states: Vec<StateData<'p>>,
}

/// Where a [`PatternWalk`] stands after a path: the patterns alive below it (an index into
/// the walk) and whether one of them matches the path itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetState {
    id: usize,
    accepts: bool,
}

#[derive(Debug)]
struct StateData<'p> {
    /// The cursors of the patterns alive below, by pattern index.
    cursors: Vec<(usize, Cursor)>,
    /// Set when the state is stable.
    triggers: Option<Triggers<'p>>,
}

/// What changes a stable state.
#[derive(Debug)]
struct Triggers<'p> {
    /// The literal and glob parts at the state's positions: a name must match one of them
    /// to change the state.
    literals: Vec<&'p [u8]>,
    globs: Vec<&'p [u8]>,
    /// Whether a name matching none of them makes a match (a cursor already at the end
    /// that stays there, as inside `**/_logs/**`).
    accepts: bool,
}

impl<'p> PatternWalk<'p> {
    /// A walk of `patterns` from the root; `None` when one of them has no [`Cursor`].
    pub fn new(patterns: Vec<&'p PathPattern>) -> Option<PatternWalk<'p>> {
        let cursors = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| p.cursor().map(|c| (i, c)))
            .collect::<Option<Vec<_>>>()?;
        let mut walk = PatternWalk {
            patterns,
            states: Vec::new(),
        };
        walk.add(cursors);
        Some(walk)
    }

    /// The state at the root (which no pattern matches).
    pub fn root(&self) -> SetState {
        SetState {
            id: 0,
            accepts: false,
        }
    }

    /// The state below `at` after one more component `name`.
    pub fn step(&mut self, at: SetState, name: &[u8]) -> SetState {
        let data = &self.states[at.id];
        if let Some(t) = &data.triggers {
            let triggered = t.literals.contains(&name)
                || t.globs
                    .iter()
                    .any(|g| glob_may_match(g, name) && matches(g, name));
            if !triggered {
                return SetState {
                    id: at.id,
                    accepts: t.accepts,
                };
            }
        }
        let mut cursors = Vec::with_capacity(data.cursors.len());
        let mut accepts = false;
        for &(i, c) in &data.cursors {
            let p = self.patterns[i];
            let next = p.step(c, name);
            accepts |= p.accepts(next);
            if p.alive(next) {
                cursors.push((i, next));
            }
        }
        let id = if cursors == data.cursors {
            at.id
        } else {
            self.add(cursors)
        };
        SetState { id, accepts }
    }

    /// Whether one of the patterns matches the path walked to `at`.
    pub fn accepts(&self, at: SetState) -> bool {
        at.accepts
    }

    /// Whether one of the patterns could match a path strictly below `at`.
    pub fn alive(&self, at: SetState) -> bool {
        !self.states[at.id].cursors.is_empty()
    }

    fn add(&mut self, cursors: Vec<(usize, Cursor)>) -> usize {
        let mut literals: Vec<&'p [u8]> = Vec::new();
        let mut globs: Vec<&'p [u8]> = Vec::new();
        let mut stable = true;
        let mut accepts = false;
        for &(i, c) in &cursors {
            let p = self.patterns[i];
            stable &= p.step_unmatched(c) == c;
            accepts |= p.accepts(c);
            for part in p.parts_at(c) {
                match part {
                    Part::Literal(l) if !literals.contains(&l.as_slice()) => literals.push(l),
                    Part::Glob(g) if !globs.contains(&g.as_slice()) => globs.push(g),
                    _ => {}
                }
            }
        }
        self.states.push(StateData {
            cursors,
            triggers: stable.then_some(Triggers {
                literals,
                globs,
                accepts,
            }),
        });
        self.states.len() - 1
    }
}

/// A cheap necessary condition for `matches(glob, name)`: a glob that does not start (end)
/// with a wildcard needs the name to start (end) with that byte.
fn glob_may_match(glob: &[u8], name: &[u8]) -> bool {
    let fixed = |g: Option<&u8>, n: Option<&u8>| match g {
        Some(b'*') | Some(b'?') | None => true,
        Some(c) => n == Some(c),
    };
    fixed(glob.first(), name.first()) && fixed(glob.last(), name.last())
}

impl PathPattern {
    /// The cursor after a component that matches none of the literal and glob parts at
    /// `at`'s positions.
    fn step_unmatched(&self, at: Cursor) -> Cursor {
        let n = self.tokens();
        let mut next = 0u64;
        let mut bits = at.0 & ((1u64 << n) - 1);
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            match self.token(j) {
                Token::AnyDepth => next |= 1 << j,
                Token::AnyOne => next |= 1 << (j + 1),
                Token::Part(_) => {}
            }
        }
        self.closure(next)
    }

    /// The literal and glob parts at `at`'s positions.
    fn parts_at(&self, at: Cursor) -> impl Iterator<Item = &Part> + '_ {
        let n = self.tokens();
        (0..n)
            .filter(move |j| at.0 & (1 << j) != 0)
            .filter_map(move |j| match self.token(j) {
                Token::Part(part) => Some(part),
                _ => None,
            })
    }
}

/// Where a walk stands in one [`PathPattern`]: the set of pattern positions the
/// components walked so far can reach (bit `j`: the first `j` positions are consumed; the
/// bit after the last position means "matched"). Made by [`PathPattern::cursor`] at the
/// root and advanced by [`PathPattern::step`], so that a walk over a tree tests each entry
/// with one step per pattern from its parent's cursor, instead of matching its whole path.
/// Only meaningful with the pattern that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor(u64);

/// One position of a cursor's automaton.
enum Token<'a> {
    /// Zero or more components (a `**`, also the tail of a trailing one).
    AnyDepth,
    /// Exactly one component of any name (the head of a trailing `**`).
    AnyOne,
    /// One component matching a literal or glob part.
    Part(&'a Part),
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

    /// Every path of up to four components over a few names, and every pattern of up to
    /// three parts over a few forms: a cursor walked down the path agrees with `matches`
    /// and `may_match_below` at every depth.
    #[test]
    fn cursors_agree_with_whole_path_matching() {
        let names: [&[u8]; 4] = [b"a", b"b", b"ab", b".x"];
        let forms = ["a", "b", "*", "**", "a*", "?", ".x"];
        let mut patterns = Vec::new();
        for len in 1..=3u32 {
            for i in 0..forms.len().pow(len) {
                let mut k = i;
                let mut parts = Vec::new();
                for _ in 0..len {
                    parts.push(forms[k % forms.len()]);
                    k /= forms.len();
                }
                patterns.push(parts.join("/"));
                patterns.push(format!("/{}", parts.join("/")));
            }
        }
        let mut paths: Vec<Vec<&[u8]>> = vec![Vec::new()];
        for depth in 1..=4 {
            let mut next = Vec::new();
            for p in paths.iter().filter(|p| p.len() == depth - 1) {
                for n in names {
                    let mut q = p.clone();
                    q.push(n);
                    next.push(q);
                }
            }
            paths.extend(next);
        }
        for text in &patterns {
            let Some(pattern) = super::PathPattern::new(text) else {
                continue;
            };
            for path in &paths {
                let mut at = pattern.cursor().expect("a short pattern");
                for (i, name) in path.iter().enumerate() {
                    let walked = &path[..i];
                    assert_eq!(
                        pattern.alive(at),
                        pattern.may_match_below(walked),
                        "{text} below {walked:?}"
                    );
                    at = pattern.step(at, name);
                }
                assert_eq!(
                    pattern.accepts(at),
                    pattern.matches(path),
                    "{text} {path:?}"
                );
                assert_eq!(
                    pattern.alive(at),
                    pattern.may_match_below(path),
                    "{text} below {path:?}"
                );
            }
        }
        // All of them walked together agree too, down every path.
        let compiled: Vec<super::PathPattern> = patterns
            .iter()
            .filter_map(|p| super::PathPattern::new(p))
            .collect();
        for chunk in compiled.chunks(40) {
            let mut walk = super::PatternWalk::new(chunk.iter().collect()).expect("short");
            for path in &paths {
                let mut at = walk.root();
                for (i, name) in path.iter().enumerate() {
                    let walked = &path[..i];
                    let below = chunk.iter().any(|p| p.may_match_below(walked));
                    assert_eq!(walk.alive(at), below, "below {walked:?}");
                    at = walk.step(at, name);
                }
                let matched = chunk.iter().any(|p| p.matches(path));
                assert_eq!(walk.accepts(at), matched, "{path:?}");
            }
        }
        let long = vec!["x"; 70].join("/");
        assert!(super::PathPattern::new(&long)
            .expect("a pattern")
            .cursor()
            .is_none());
    }
}
