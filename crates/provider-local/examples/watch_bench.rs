//! Times the change watcher's setup and the fingerprint scan on an existing tree.
//!
//! ```sh
//! cargo run --release -p agentbox-boxes --example watch_bench -- TREE [ROUNDS]
//! ```
//!
//! Prints, for each round: the time to build a [`Watcher`] (walk + one watch per directory),
//! its watch count, and the time of one [`fingerprint`] of the same tree; with the default
//! ignore patterns.

use std::path::PathBuf;
use std::time::Instant;

use agentbox_provider_local::watch::{fingerprint, IgnoreSet, Watcher};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let root = PathBuf::from(args.next().ok_or("usage: watch_bench TREE [ROUNDS]")?);
    let rounds: usize = match args.next() {
        Some(r) => r.to_string_lossy().parse()?,
        None => 5,
    };
    let ignore = IgnoreSet::new(&IgnoreSet::default_patterns());
    for round in 1..=rounds {
        let start = Instant::now();
        let watcher = Watcher::new(&root, ignore.clone())?;
        let setup = start.elapsed();
        let watches = watcher.watch_count();
        let start = Instant::now();
        let sum = fingerprint(&root, &ignore)?;
        let scan = start.elapsed();
        let start = Instant::now();
        drop(watcher);
        let teardown = start.elapsed();
        println!(
            "round {round}: watcher setup {:.1} ms ({watches} watches), teardown {:.1} ms, \
             fingerprint {:.1} ms ({sum:016x})",
            setup.as_secs_f64() * 1e3,
            teardown.as_secs_f64() * 1e3,
            scan.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}
