//! A Docker box's process log read past its start, as `logs -f` follows it (a real engine):
//! in a running box with `tail` and `head` (busybox's) only the new bytes are read, in the
//! box, and the box's tools cannot make the read larger than asked; when the box says it
//! has none, the engine's archive read gives the same bytes.

mod common;

use agentbox_boxes::progress::Quiet;
use agentbox_boxes::types::ProcKind;
use agentbox_core::home::Home;
use agentbox_testkit::TempHome;
use common::{box_name, boxes, command, dirty_repo, engine, output, spec, test_image, Sweep};

#[test]
fn a_log_past_its_start_is_read_in_the_box_bounded_or_through_the_archive() {
    let test = "a_log_past_its_start_is_read_in_the_box_bounded_or_through_the_archive";
    let Some(engine) = engine(test) else { return };
    let image = test_image(&engine);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let repo = tmp.path().join("repo");
    fs_err::create_dir_all(&repo).expect("repo");
    dirty_repo(&repo);
    let boxes = boxes(&home);
    let name = box_name("logs");
    boxes
        .create(&spec(&name, &repo, &image), &Quiet)
        .expect("create");
    let mut c = command(&[
        "sh",
        "-c",
        "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; exec sleep 300",
    ]);
    c.kind = ProcKind::Spawn;
    c.capture = false;
    let started = boxes.spawn(&name, c).expect("spawn");
    let whole: Vec<u8> = (0..2000)
        .flat_map(|i| format!("line-{i}\n").into_bytes())
        .collect();
    while boxes
        .read_log(&name, started.id, 0, 1 << 20)
        .expect("log")
        .len()
        < whole.len()
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let read = |offset: usize, max: usize| {
        boxes
            .read_log(&name, started.id, offset as u64, max)
            .expect("log")
    };
    for (offset, max) in [
        (1, 10),
        (5000, 100),
        (whole.len() - 3, 100),
        (whole.len(), 10),
    ] {
        let end = (offset + max).min(whole.len());
        assert_eq!(read(offset, max), &whole[offset..end], "at {offset}");
    }

    // The box's own `sh` prints what it likes: only `max` bytes of it are taken (and that
    // it ran shows the read was made in the box).
    let forge = |script: &str| {
        let argv = [
            "/bin/busybox",
            "sh",
            "-c",
            &format!("rm -f /bin/sh && printf '#!/bin/busybox sh\\n{script}\\n' > /bin/sh && chmod 755 /bin/sh"),
        ];
        assert_eq!(output(&boxes, &name, &argv).0, 0);
    };
    forge("while :; do echo forged; done");
    let got = read(1, 1000);
    assert_eq!(got.len(), 1000);
    assert!(
        got.starts_with(b"forged\n"),
        "{:?}",
        String::from_utf8_lossy(&got[..20])
    );

    // One that says it has no `tail` or `head`: the archive read gives the log's bytes.
    forge("exit 4");
    assert_eq!(read(5000, 100), &whole[5000..5100]);
    boxes.destroy(&name, true, &Quiet).expect("destroy");
}
