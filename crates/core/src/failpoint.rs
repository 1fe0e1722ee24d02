//! Crash injection for tests of crash safety.
//!
//! Code that performs a multi-step durable operation calls [`hit`] between steps with a
//! stable name (`"commit:after-layer"`, …). When the environment variable
//! `AGENTBOX_FAILPOINT` equals that name the process aborts on the spot, exactly as a
//! `kill -9` at that moment would leave things. Tests run every named point and then check
//! that the store opens, reconciles and passes `fsck`. Without the variable this is one
//! environment lookup per step.

/// Abort the process if the failpoint `name` is armed.
pub fn hit(name: &str) {
    if let Some(armed) = std::env::var_os("AGENTBOX_FAILPOINT") {
        if armed == name {
            eprintln!("agentbox: failpoint {name} hit, aborting");
            std::process::abort();
        }
    }
}
