#![allow(clippy::unwrap_used)]
use std::path::Path;
use std::time::Instant;

use agentbox_store::{BackendKind, Cleanup, CommitOpts, DetachOpts, Source, Store};

fn run(kind: BackendKind, base: &Path, tree: &Path) {
    let store = Store::init(&base.join("store"), Some(kind)).unwrap();
    let dir = base.join("mnt");
    let t = Instant::now();
    store
        .create_env("b", Some(&dir), Source::Dir(tree.to_owned()), "init")
        .unwrap();
    println!("{kind}: create {:?}", t.elapsed());
    std::fs::write(dir.join("src/changed.txt"), b"x").unwrap();
    store
        .commit(
            "b",
            CommitOpts {
                message: "c".into(),
                ..Default::default()
            },
        )
        .unwrap();
    for (label, cleanup) in [
        ("checkpoint cleanup", Cleanup::checkpoint()),
        (
            "heavy cleanup (+ truncate **/*.md, delete node_modules/*/dist/**)",
            {
                let mut c = Cleanup::checkpoint();
                c.truncate.push("**/*.md".into());
                c.delete.push("node_modules/*/dist/**".into());
                c
            },
        ),
    ] {
        let r = format!("bench/r{}", label.len());
        let t = Instant::now();
        let d = store
            .derive("b", "HEAD", &cleanup, DetachOpts::new(r.as_str(), "warm"))
            .unwrap();
        let dt = t.elapsed();
        println!(
            "{kind}: derive [{label}] {:?}: deleted {} truncated {} bytes {} chain {}",
            dt,
            d.deleted,
            d.truncated,
            d.bytes,
            store.chain(&d.node).unwrap().len()
        );
        let t = Instant::now();
        let f = store
            .flatten("b", &r, DetachOpts::new(r.as_str(), "flat"))
            .unwrap();
        println!(
            "{kind}: flatten {:?} chain {}",
            t.elapsed(),
            store.chain(&f).unwrap().len()
        );
    }
    let t = Instant::now();
    store
        .fork_node("bench/r18", "forked", Some(&base.join("mnt2")))
        .unwrap();
    println!("{kind}: fork from checkpoint {:?}", t.elapsed());
    store.remove_env("forked").unwrap();
    store.remove_env("b").unwrap();
}

fn main() {
    let tree = Path::new("/work/bench-ckpt/tree");
    let which = std::env::args().nth(1).unwrap();
    if which == "layers" {
        let base = Path::new("/work/bench-ckpt/layers");
        let _ = std::fs::remove_dir_all(base);
        std::fs::create_dir_all(base).unwrap();
        run(BackendKind::Layers, base, tree);
    } else {
        let fs = agentbox_testkit::loopfs::LoopFs::btrfs(4 << 30).unwrap();
        run(BackendKind::Btrfs, fs.path(), tree);
    }
}
