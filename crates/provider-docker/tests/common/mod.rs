//! What the Docker provider's tests share: the engine (skipping without one), the test
//! image, a façade with the Docker provider beside the local one, a dirty git repository,
//! and looks at the engine from outside the provider.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use agentbox_boxes::lifecycle::create::{Settings, Spec, Workspace};
use agentbox_boxes::provider::Command;
use agentbox_boxes::types::ProcKind;
use agentbox_boxes::Boxes;
use agentbox_core::home::Home;
use agentbox_docker::endpoint::{Endpoint, Origin};
use agentbox_docker::Engine;
use agentbox_provider_docker::{names, DockerProvider};
use agentbox_testkit::tier;

/// The local engine, or `None` (the test is skipped) when there is none.
pub fn engine(test: &str) -> Option<Engine> {
    if !tier::require_root(test)
        || !tier::require_docker(test)
        || !tier::require_tool(test, "busybox")
        || !tier::require_tool(test, "git")
    {
        return None;
    }
    let ep = Endpoint {
        host: agentbox_docker::endpoint::DEFAULT_HOST.into(),
        origin: Origin::Default,
        tls: None,
    };
    Some(Engine::connect(ep).expect("connect to the local engine"))
}

/// The test image on `engine`.
pub fn test_image(engine: &Engine) -> String {
    agentbox_testkit::busybox_image::busybox_image(
        |name| engine.image(name).expect("inspect").is_some(),
        |tar, repo, tag, changes| {
            engine
                .import_rootfs(tar, repo, tag, changes)
                .expect("import");
        },
    )
}

/// A façade on `home` whose Docker provider runs the boxes that name it.
pub fn boxes(home: &Home) -> Boxes {
    let local = agentbox_provider_local::LocalProvider::new(home.clone());
    Boxes::new(home.clone(), Arc::new(local))
        .with_provider(Arc::new(DockerProvider::new(home.clone())))
}

/// A box name no other test process uses on the shared engine.
pub fn box_name(what: &str) -> String {
    format!("{what}-{}", std::process::id())
}

/// The spec of a Docker box `name` on `image` made from `dir`.
pub fn spec(name: &str, dir: &Path, image: &str) -> Spec {
    Spec {
        name: Some(name.to_owned()),
        workspace: Workspace::From(dir.to_owned()),
        from_ref: None,
        no_git: false,
        settings: Settings {
            image: Some(image.to_owned()),
            ..Default::default()
        },
        checkpoint: None,
        no_checkpoint: true,
        resync: None,
        accept_stale: false,
        provider: Some("docker".into()),
        engine: None,
        dockerfile: None,
    }
}

/// `git ARGS` in `dir` (identity given); its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=u", "-c", "user.email=u@example.org"])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with two commits, an uncommitted change of `a.txt` and an untracked
/// `u.txt`.
pub fn dirty_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    fs_err::write(dir.join("a.txt"), "one\n").expect("write");
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "first"]);
    fs_err::write(dir.join("a.txt"), "two\n").expect("write");
    git(dir, &["commit", "-q", "-am", "second"]);
    fs_err::write(dir.join("a.txt"), "two, then uncommitted\n").expect("write");
    fs_err::write(dir.join("u.txt"), "untracked\n").expect("write");
}

/// A command run with capture and no terminal.
pub fn command(argv: &[&str]) -> Command {
    Command {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        env: Vec::new(),
        workdir: None,
        kind: ProcKind::Exec,
        capture: true,
        tty: Some(false),
    }
}

/// Run `argv` in box `name` (no capture), its status and output.
pub fn output(boxes: &Boxes, name: &str, argv: &[&str]) -> (i32, String) {
    let c = boxes
        .provider_of(name)
        .expect("provider")
        .collect(
            name,
            argv.iter().map(|a| (*a).to_owned()).collect(),
            "/workspace",
            false,
        )
        .expect("collect");
    (c.status, c.output)
}

/// The containers and images of `home` on `engine` (by their labels).
pub fn leftovers(engine: &Engine, home: &Home) -> (Vec<String>, Vec<String>) {
    let key = names::home_key(home);
    let containers = engine
        .containers_labelled(names::HOME_LABEL, &key)
        .expect("containers")
        .into_iter()
        .map(|c| c.name)
        .collect();
    let images = engine
        .images_labelled(names::HOME_LABEL, &key)
        .expect("images")
        .into_iter()
        .map(|i| i.id)
        .collect();
    (containers, images)
}

/// Everything of `home` on `engine` (containers, then images), removed when dropped: a
/// test that fails leaves nothing on the shared engine.
pub struct Sweep<'a> {
    pub engine: &'a Engine,
    pub home: Home,
}

impl Drop for Sweep<'_> {
    fn drop(&mut self) {
        let key = names::home_key(&self.home);
        if let Ok(cs) = self.engine.containers_labelled(names::HOME_LABEL, &key) {
            for c in cs {
                let _ = self.engine.remove_container(&c.name);
            }
        }
        // Newest first: an image built on another goes before it.
        if let Ok(mut is) = self.engine.images_labelled(names::HOME_LABEL, &key) {
            is.sort_by_key(|i| std::cmp::Reverse(i.created));
            for i in is {
                let _ = agentbox_provider_docker::prune::remove_node_image(self.engine, &i.id);
            }
        }
    }
}

/// A test image with `git` (and, with `python`, `python3` and its standard library): the
/// host's own binaries, libraries and data directories ([`agentbox_testkit::rootfs`]),
/// imported once per content (the hash of the binaries) on `engine`.
pub fn tools_image(engine: &Engine, python: bool) -> String {
    let mut binaries = vec!["/usr/bin/git"];
    let mut trees = vec!["/usr/lib/git-core", "/usr/share/git-core"];
    if python {
        binaries.push("/usr/bin/python3");
        trees.push("/usr/lib/python3.11");
    }
    let mut h = blake3::Hasher::new();
    for b in agentbox_testkit::rootfs::BINARIES.iter().chain(&binaries) {
        h.update(b.as_bytes());
        if let Ok(bytes) = fs_err::read(b) {
            h.update(&bytes);
        }
    }
    for t in &trees {
        h.update(t.as_bytes());
    }
    let repo = "agentbox-test-tools";
    let tag = h.finalize().to_hex()[..16].to_owned();
    let name = format!("{repo}:{tag}");
    // Parallel test processes: one imports, the others wait and find it.
    let lock = std::fs::File::create(std::env::temp_dir().join("agentbox-test-tools.lock"))
        .expect("lock file");
    lock.lock().expect("lock");
    if engine.image(&name).expect("inspect").is_some() {
        return name;
    }
    let work = tempfile::tempdir().expect("tmp");
    let tar = work.path().join("rootfs.tar");
    agentbox_testkit::rootfs::build_tar_with(work.path(), &tar, &binaries, &trees);
    engine
        .import_rootfs(
            &tar,
            repo,
            &tag,
            &["ENV PATH=/usr/bin:/bin".into(), "WORKDIR /workspace".into()],
        )
        .expect("import");
    name
}

/// The test image ([`test_image`]: busybox, whose `find`, `xargs`, `mv`, `cmp` and
/// `readlink` a checkpoint's capture and restore use) with the host's `git` added,
/// committed once per content on `engine`.
pub fn git_busybox_image(engine: &Engine) -> String {
    let base = test_image(engine);
    let mut h = blake3::Hasher::new();
    h.update(base.as_bytes());
    for b in agentbox_testkit::rootfs::BINARIES
        .iter()
        .chain(&["/usr/bin/git"])
    {
        h.update(b.as_bytes());
        if let Ok(bytes) = fs_err::read(b) {
            h.update(&bytes);
        }
    }
    let repo = "agentbox-test-gitbox";
    let tag = h.finalize().to_hex()[..16].to_owned();
    let name = format!("{repo}:{tag}");
    let lock = std::fs::File::create(std::env::temp_dir().join("agentbox-test-gitbox.lock"))
        .expect("lock file");
    lock.lock().expect("lock");
    if engine.image(&name).expect("inspect").is_some() {
        return name;
    }
    let work = tempfile::tempdir().expect("tmp");
    let tar = work.path().join("rootfs.tar");
    agentbox_testkit::rootfs::build_tar_with(
        work.path(),
        &tar,
        &["/usr/bin/git"],
        &["/usr/lib/git-core", "/usr/share/git-core"],
    );
    let container = format!("agentbox-test-gitbox-{}", std::process::id());
    engine
        .create_container(&agentbox_docker::container::ContainerSpec {
            name: container.clone(),
            image: base,
            cmd: vec!["true".into()],
            ..Default::default()
        })
        .expect("create");
    engine.upload_tar(&container, "/", &tar).expect("upload");
    engine
        .commit(&container, repo, &tag, "git added", &Default::default())
        .expect("commit");
    engine.remove_container(&container).expect("remove");
    name
}
