//! A real project's own test suite in a Docker box: the sdist of `more-itertools` (a
//! Python project tested with `unittest`), which `.ci/run` downloads into the test cache
//! (`AGENTBOX_TEST_CACHE`, default `~/.cache/agentbox-test`). Its suite runs on the host
//! and in a box of an image made of the host's own `python3`; every test's outcome must be
//! the same. Without the sdist the test is skipped, saying why — and fails under `CI=true`.

mod common;

use std::path::PathBuf;

use agentbox_boxes::progress::Quiet;
use agentbox_core::home::Home;
use agentbox_testkit::{tier, TempHome};
use common::{box_name, boxes, engine, output, spec, tools_image, Sweep};

const SDIST: &str = "more-itertools-10.5.0.tar.gz";
/// The sdist's SHA-256, as PyPI publishes it.
const SDIST_SHA256: &str = "5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6";

fn cache() -> PathBuf {
    match std::env::var_os("AGENTBOX_TEST_CACHE") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .join(".cache/agentbox-test"),
    }
}

/// The suite's verbose report (each test and its outcome, then the summary) without the
/// line giving the time it took.
fn outcomes(report: &str) -> String {
    report
        .lines()
        .filter(|l| !(l.starts_with("Ran ") && l.contains(" tests in ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_python_projects_own_test_suite_passes_in_a_docker_box_as_on_the_host() {
    let test = "a_python_projects_own_test_suite_passes_in_a_docker_box_as_on_the_host";
    let Some(engine) = engine(test) else { return };
    if !std::path::Path::new("/usr/bin/python3").exists() {
        tier::skip(test, "the host has no /usr/bin/python3");
        return;
    }
    let sdist = cache().join(SDIST);
    if !sdist.exists() {
        tier::skip(
            test,
            &format!("{} is absent (.ci/run downloads it)", sdist.display()),
        );
        return;
    }
    let bytes = fs_err::read(&sdist).expect("read the sdist");
    let digest = std::process::Command::new("sha256sum")
        .arg(&sdist)
        .output()
        .expect("sha256sum");
    assert!(
        String::from_utf8_lossy(&digest.stdout).starts_with(SDIST_SHA256),
        "{} is not the published sdist ({} bytes)",
        sdist.display(),
        bytes.len()
    );
    let image = tools_image(&engine, true);
    let tmp = TempHome::new();
    let home = Home::at(tmp.path().join("home"));
    let _sweep = Sweep {
        engine: &engine,
        home: home.clone(),
    };
    let unpacked = tmp.path().join("src");
    fs_err::create_dir_all(&unpacked).expect("dir");
    let ok = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&sdist)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .expect("tar")
        .success();
    assert!(ok, "unpacking {}", sdist.display());
    let project = unpacked.join("more-itertools-10.5.0");
    let suite = "PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m unittest -v 2>&1";

    // The box is made first: the host's run then leaves nothing in what the box gets.
    let boxes = boxes(&home);
    let name = box_name("pyproj");
    let mut s = spec(&name, &project, &image);
    s.no_git = true;
    boxes.create(&s, &Quiet).expect("create");

    let host = std::process::Command::new("sh")
        .args(["-c", suite])
        .current_dir(&project)
        .output()
        .expect("run the suite on the host");
    let host_report = String::from_utf8_lossy(&host.stdout).into_owned();
    assert_eq!(host.status.code(), Some(0), "{host_report}");
    assert!(host_report.contains("\nOK"), "{host_report}");

    let (status, box_report) = output(&boxes, &name, &["sh", "-c", suite]);
    assert_eq!(status, 0, "{box_report}");
    // Where the project is shows in warnings: the box's `/workspace` is the host's copy.
    let on_host = host_report.replace(&*project.to_string_lossy(), "/workspace");
    let (in_box, on_host) = (outcomes(&box_report), outcomes(&on_host));
    if let Some((i, (b, h))) = in_box
        .lines()
        .zip(on_host.lines())
        .enumerate()
        .find(|(_, (b, h))| b != h)
    {
        panic!("line {i} differs:\n  box:  {b}\n  host: {h}");
    }
    assert_eq!(
        in_box.lines().count(),
        on_host.lines().count(),
        "the box's report:\n{in_box}"
    );
    boxes.destroy(&name, true, &Quiet).expect("destroy");
}
