//! The commit of a box its supervisor stopped ([`Store::commit_stopped_box`], tier 2): on
//! the `layers` backend the upper directory becomes the node's layer by a rename (the same
//! inodes, nothing copied) and the box's next start mounts a fresh one over the node; on
//! every backend the node and the working tree after it are exactly what a copying commit
//! gives, and later writes never change the node.

use std::os::unix::fs::MetadataExt;

use agentbox_store::backend::BackendKind;
use agentbox_store::{CommitOpts, Source, Store};

use crate::common::{commit, fixtures, whiteout, write};

fn changed(store: &Store, env: &str, a: &str, b: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = store
        .diff(env, a, b)
        .expect("diff")
        .into_iter()
        .map(|c| c.path.display().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn a_stopped_box_hands_its_upper_directory_to_the_node() {
    for fx in fixtures("a_stopped_box_hands_its_upper_directory_to_the_node") {
        let store = fx.store();
        let src = fx.base.join("src");
        write(&src.join("workspace/kept"), "kept");
        write(&src.join("workspace/gone"), "to be removed");
        write(&src.join("workspace/old/x"), "old tree");
        store
            .create_env("bx", None, Source::Dir(src), "initial")
            .expect("create");
        let upper = store.box_layers("bx").expect("box layers").upper;
        // A first node copied as a running box's is, then more changes.
        write(&upper.join("workspace/first"), "1");
        let first = commit(&store, "bx", "first").to_string();
        write(&upper.join("workspace/new/deep/f"), "new");
        write(&upper.join("workspace/first"), "1 again");
        whiteout(&upper.join("workspace/gone"));
        let ino = std::fs::metadata(upper.join("workspace/new/deep/f"))
            .expect("stat")
            .ino();

        let node = store
            .commit_stopped_box(
                "bx",
                CommitOpts {
                    message: "stopped".into(),
                    ..CommitOpts::default()
                },
            )
            .expect("commit a stopped box")
            .id
            .to_string();
        assert_eq!(
            changed(&store, "bx", &first, Some(&node)),
            [
                "workspace/first",
                "workspace/gone",
                "workspace/new",
                "workspace/new/deep",
                "workspace/new/deep/f"
            ],
            "{:?}",
            fx.kind
        );
        if fx.kind == BackendKind::Layers {
            let layer = fx.base.join("store/layers").join(&node);
            assert_eq!(
                std::fs::metadata(layer.join("workspace/new/deep/f"))
                    .expect("in the layer")
                    .ino(),
                ino,
                "renamed, not copied"
            );
        }
        // The box starts again over the node: nothing uncommitted, the tree as it was.
        let upper = store.box_layers("bx").expect("box layers").upper;
        assert_eq!(
            changed(&store, "bx", "HEAD", None),
            Vec::<String>::new(),
            "{:?}",
            fx.kind
        );
        {
            let view = store.working_view("bx").expect("view");
            let read = |p: &str| std::fs::read_to_string(view.path.join(p)).ok();
            assert_eq!(read("workspace/new/deep/f").as_deref(), Some("new"));
            assert_eq!(read("workspace/first").as_deref(), Some("1 again"));
            assert_eq!(read("workspace/kept").as_deref(), Some("kept"));
            assert_eq!(read("workspace/old/x").as_deref(), Some("old tree"));
            assert_eq!(read("workspace/gone"), None);
        }
        // A later write (in the fresh upper directory) makes a node of its own and never
        // changes the stopped box's node.
        write(&upper.join("workspace/new/deep/f"), "changed later");
        let later = commit(&store, "bx", "later").to_string();
        assert_eq!(
            changed(&store, "bx", &node, Some(&later)),
            ["workspace/new/deep/f"],
            "{:?}",
            fx.kind
        );
        store.checkout("bx", &node).expect("checkout");
        let view = store.working_view("bx").expect("view");
        assert_eq!(
            std::fs::read_to_string(view.path.join("workspace/new/deep/f")).expect("read"),
            "new",
            "{:?}",
            fx.kind
        );
    }
}
