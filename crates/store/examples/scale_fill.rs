//! Fill a store with many nodes fast, for `bench/scale`: through the store library's own
//! `create_env` and `commit` (the code the CLI runs, without a process per commit).
//!
//! `scale_fill STORE DIRS ENVS NODES`: environments `s0` … `s<ENVS-1>`, each a versioned
//! directory `DIRS/s<i>`, share `NODES` nodes evenly (each one's first node included); every
//! commit changes one file.

use std::path::PathBuf;

use agentbox_store::{CommitOpts, Source, Store};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store, dirs, envs, nodes] = args.as_slice() else {
        eprintln!("usage: scale_fill STORE DIRS ENVS NODES");
        std::process::exit(2);
    };
    let envs: usize = envs.parse().expect("ENVS is a number");
    let nodes: usize = nodes.parse().expect("NODES is a number");
    let store = Store::open_or_init(&PathBuf::from(store), None).expect("open the store");
    let per_env = (nodes / envs).max(1);
    for e in 0..envs {
        let name = format!("s{e}");
        let dir = PathBuf::from(dirs).join(&name);
        let src = PathBuf::from(dirs).join(format!(".src-{name}"));
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::write(src.join("f"), "0").expect("write");
        store
            .create_env(&name, Some(&dir), Source::Dir(src.clone()), "initial")
            .expect("create");
        std::fs::remove_dir_all(&src).expect("rm");
        for i in 1..per_env {
            std::fs::write(dir.join("f"), i.to_string()).expect("write");
            store
                .commit(
                    &name,
                    CommitOpts {
                        message: format!("change {i}"),
                        ..CommitOpts::default()
                    },
                )
                .expect("commit");
        }
    }
}
