//! The in-box binary copied into a box's container through the engine (tier 2, a real
//! engine): only when the container's stamp does not name it, and its paths are never a
//! change of the box. The host's static busybox stands in for the static agentbox (the
//! copy is the same for any static program).

mod common;

use agentbox_boxes::progress::Quiet;
use agentbox_core::home::Home;
use agentbox_provider_docker::names;
use agentbox_provider_docker::relay::inbox_bin;
use agentbox_testkit::TempHome;
use common::{box_name, boxes, command, engine, output, spec, test_image, Sweep};

#[test]
fn the_in_box_binary_is_copied_once_per_content_and_is_no_change_of_the_box() {
    let test = "the_in_box_binary_is_copied_once_per_content_and_is_no_change_of_the_box";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    fs_err::create_dir_all(home.root()).expect("home");
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let dir = tmp.path().join("project");
    fs_err::create_dir_all(&dir).expect("project");
    fs_err::write(dir.join("a.txt"), "one\n").expect("write");
    let boxes = boxes(&home);
    let name = box_name("inbox");
    boxes
        .create(&spec(&name, &dir, &image), &Quiet)
        .expect("create");
    let container = names::container(&name);
    let spool = tmp.path();

    // A dynamic program is refused, saying how to build a static one.
    let dynamic = std::env::current_exe().expect("exe");
    let refused = inbox_bin::at(&dynamic).expect_err("dynamic");
    assert!(refused.hint().unwrap_or_default().contains("crt-static"));

    let bin = inbox_bin::at(std::path::Path::new("/bin/busybox")).expect("static busybox");
    assert!(inbox_bin::ensure_with(&engine, &container, &bin, spool).expect("copy"));
    let (st, out) = output(&boxes, &name, &["cmp", inbox_bin::IN_BOX, "/bin/busybox"]);
    assert_eq!((st, out.as_str()), (0, ""));
    let (_, stamp) = output(&boxes, &name, &["cat", inbox_bin::STAMP]);
    assert_eq!(stamp, bin.hash);
    // The same content again: not copied.
    assert!(!inbox_bin::ensure_with(&engine, &container, &bin, spool).expect("again"));

    // Another content: copied over it.
    let other = tmp.path().join("busybox-other");
    let mut bytes = fs_err::read("/bin/busybox").expect("read");
    bytes.extend_from_slice(b"\0another build");
    fs_err::write(&other, &bytes).expect("write");
    let other = inbox_bin::at(&other).expect("still static");
    assert_ne!(other.hash, bin.hash);
    assert!(inbox_bin::ensure_with(&engine, &container, &other, spool).expect("replace"));
    let (_, stamp) = output(&boxes, &name, &["cat", inbox_bin::STAMP]);
    assert_eq!(stamp, other.hash);

    // None of it is a change of the box: a command that changes nothing makes no node, and
    // the box's history is still its first node.
    let made = boxes.exec(&name, command(&["true"])).expect("exec");
    assert_eq!(made.node, None, "the copied binary made a node");
    let history = boxes.history(&name).expect("history");
    assert_eq!(history.nodes.len(), 1, "{:?}", history.nodes);
}
