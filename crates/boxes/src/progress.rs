//! How a long operation reports to its front end: status lines, and work the front end may
//! show progress for. Every layer that makes or moves boxes takes a `&dyn Progress`.

use crate::Result;

/// How an operation tells its front end what it is doing: a line for the user, and long
/// work the front end may show progress for.
pub trait Progress {
    /// A status line (to stderr, for a terminal front end).
    fn note(&self, line: &str);
    /// Run `work`, described as `what`, showing that it is in progress.
    fn busy(&self, what: &str, work: &mut dyn FnMut() -> Result<()>) -> Result<()>;
}

/// A front end that shows nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn note(&self, _line: &str) {}
    fn busy(&self, _what: &str, work: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        work()
    }
}
