//! Two agentbox homes on one engine: a box's container is named after the box, so when one
//! home's container goes behind its back and another home makes a box of that name, the
//! first home must never act on the second's container (run in it, commit it, stop or
//! remove it), and can still destroy its own box.

mod common;

use agentbox_boxes::progress::Quiet;
use agentbox_core::home::Home;
use agentbox_provider_docker::names;
use agentbox_testkit::TempHome;
use common::{box_name, boxes, dirty_repo, engine, leftovers, output, spec, test_image, Sweep};

#[test]
fn a_box_never_acts_on_another_homes_container_of_its_name() {
    let test = "a_box_never_acts_on_another_homes_container_of_its_name";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let (home_a, home_b) = (
        Home::at(tmp.path().join("home-a")),
        Home::at(tmp.path().join("home-b")),
    );
    let _sweep_a = Sweep {
        engine: &engine,
        home: home_a.clone(),
    };
    let _sweep_b = Sweep {
        engine: &engine,
        home: home_b.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let (a, b) = (boxes(&home_a), boxes(&home_b));
    let name = box_name("homes");
    let container = names::container(&name);

    a.create(&spec(&name, &repo, &image), &Quiet)
        .expect("home A's box");
    // Home A's container goes behind its back; home B makes a box of the same name.
    engine.remove_container(&container).expect("remove");
    let repo_b = tmp.path().join("repo-b");
    fs_err::create_dir_all(&repo_b).expect("repo b");
    dirty_repo(&repo_b);
    b.create(&spec(&name, &repo_b, &image), &Quiet)
        .expect("home B's box of the same name");
    let (status, _) = output(
        &b,
        &name,
        &["sh", "-c", "echo mine > /workspace/b-only.txt"],
    );
    assert_eq!(status, 0);
    let b_id = engine
        .container(&container)
        .expect("inspect")
        .expect("B's container")
        .id;

    // Home A runs nothing in it, commits nothing of it, checks nothing out into it.
    let pa = a.provider_of(&name).expect("provider");
    let refused = pa
        .collect(
            &name,
            vec!["cat".into(), "b-only.txt".into()],
            "/workspace",
            false,
        )
        .expect_err("A must not run in B's container");
    assert!(
        refused
            .to_string()
            .contains("belongs to another agentbox home"),
        "{refused}"
    );
    let refused = pa
        .commit(&name, "steal", None)
        .expect_err("A must not commit B's container");
    assert!(
        refused
            .to_string()
            .contains("belongs to another agentbox home"),
        "{refused}"
    );
    let refused = pa
        .checkout(&name, "HEAD", false)
        .expect_err("A must not recreate B's container");
    assert!(
        refused
            .to_string()
            .contains("belongs to another agentbox home"),
        "{refused}"
    );
    assert!(!pa.is_running(&name).unwrap_or(false));

    // Home A destroys its box: its own record and images go, B's container stays as it was.
    a.destroy(&name, false, &Quiet).expect("destroy A's box");
    let still = engine
        .container(&container)
        .expect("inspect")
        .expect("B's container is still there");
    assert_eq!(still.id, b_id);
    assert!(still.running, "B's container was stopped by A");
    let (status, out) = output(&b, &name, &["cat", "/workspace/b-only.txt"]);
    assert_eq!((status, out.as_str()), (0, "mine\n"));
    a.gc().expect("A's gc");
    a.prune(std::time::Duration::ZERO, false)
        .expect("A's prune");
    assert!(
        engine.container(&container).expect("inspect").is_some(),
        "A's prune removed B's container"
    );
    assert_eq!(leftovers(&engine, &home_a), (Vec::new(), Vec::new()));

    b.destroy(&name, false, &Quiet).expect("destroy B's box");
    assert!(engine.container(&container).expect("inspect").is_none());
}
