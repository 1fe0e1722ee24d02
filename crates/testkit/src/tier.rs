//! Privilege tiers for tests.
//!
//! Tier 0 runs anywhere. Tier 1 needs unprivileged user namespaces. Tier 2 needs root (mounts,
//! loop devices, btrfs, a Docker engine). `require_*` returns `false` (after printing why)
//! when the test should be skipped; under `CI=true` it panics instead, because CI runs as
//! root and a skipped tier there would hide a failure.

/// True when running under CI (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
}

/// Skip (or fail under CI) with `reason`. Returns `false` so callers can `if !skip(..) {return}`.
pub fn skip(test: &str, reason: &str) -> bool {
    if in_ci() {
        panic!("{test}: required capability missing under CI=true: {reason}");
    }
    eprintln!("SKIP {test}: {reason}");
    false
}

/// Tier 2: the test needs root.
pub fn require_root(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        true
    } else {
        skip(
            test,
            "needs root (mounts, loop devices); run the suite as root",
        )
    }
}

/// The test drives program `tool` (found on `PATH`).
pub fn require_tool(test: &str, tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
    found
        || skip(
            test,
            &format!("needs `{tool}` on PATH (apt-get install {tool})"),
        )
}

/// Tier 2: the test needs a Docker engine on the default socket (`.ci/run` starts one).
pub fn require_docker(test: &str) -> bool {
    let socket = std::path::Path::new("/var/run/docker.sock");
    let answers = std::os::unix::net::UnixStream::connect(socket).is_ok();
    answers
        || skip(
            test,
            "needs a running Docker engine on /var/run/docker.sock (apt-get install docker.io; dockerd)",
        )
}
