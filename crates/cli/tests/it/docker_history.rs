//! A Docker box's history beyond commit and checkout, through the binary (a real engine):
//! `fork` makes a Docker box on its own branch, `tournament --keep` races Docker forks and
//! moves the source to the winner, `checkpoint create/ls/rm` keep a checkpoint as an image,
//! `create --checkpoint` starts a Docker box warm from it; at the end, nothing of the home
//! is left on the engine (`docker_checkpoint_file` moves one between homes).

use agentbox_core::Home;
use agentbox_docker::Engine;

use crate::common::{code, git, stderr, write, Env};
use crate::docker::{engine, on_engine, test_image, Sweep};

/// The busybox test image with the host's `git` added (committed once per content): the
/// box's git moves a fork's branch, and a box from a checkpoint needs `find`, `xargs`,
/// `mv`, `cmp` and `readlink`, which busybox has.
pub(crate) fn git_image(engine: &Engine) -> String {
    let base = test_image(engine);
    let mut h = blake3::Hasher::new();
    h.update(base.as_bytes());
    for b in agentbox_testkit::rootfs::BINARIES
        .iter()
        .chain(&["/usr/bin/git"])
    {
        h.update(b.as_bytes());
        if let Ok(bytes) = std::fs::read(b) {
            h.update(&bytes);
        }
    }
    let repo = "agentbox-test-gitbox-path";
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
    let container = format!("agentbox-test-gitbox-cli-{}", std::process::id());
    engine
        .create_container(&agentbox_docker::container::ContainerSpec {
            name: container.clone(),
            image: base,
            cmd: vec!["true".into()],
            ..Default::default()
        })
        .expect("create");
    engine.upload_tar(&container, "/", &tar).expect("upload");
    // Exported and imported again: the image's `PATH` must reach `/usr/bin`.
    let all = work.path().join("all.tar");
    engine.export_container(&container, &all).expect("export");
    engine.remove_container(&container).expect("remove");
    engine
        .import_rootfs(
            &all,
            repo,
            &tag,
            &["ENV PATH=/usr/bin:/bin".into(), "WORKDIR /workspace".into()],
        )
        .expect("import");
    name
}

fn out(env: &Env, args: &[&str]) -> String {
    let o = env.run(args);
    assert_eq!(code(&o), Some(0), "{args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_docker_box_forks_races_and_checkpoints_through_the_command_line() {
    let test = "a_docker_box_forks_races_and_checkpoints_through_the_command_line";
    let Some(engine) = engine(test) else { return };
    let image = git_image(&engine);
    let env = Env::new();
    let home = Home::at(env.path("home"));
    let _sweep = Sweep(&engine, home.clone());
    let project = env.path("project");
    write(&project.join(".gitignore"), "deps/\n");
    write(&project.join("a.txt"), "one\n");
    git(&project, &["init", "-q", "-b", "main"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-qm", "first"]);
    let name = format!("hist-{}", std::process::id());
    env.run_in(
        &project,
        &["create", "--provider", "docker", "--image", &image, &name],
    );
    out(
        &env,
        &[
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            "mkdir -p deps && echo warm > deps/lib.txt && echo gen > gen.txt",
        ],
    );

    // A fork: a Docker box of its own, on its own branch, with the source's work.
    let fork = format!("{name}-f");
    let made = env.json(&["fork", &name, &fork]);
    assert_eq!(made["provider"], "docker", "{made}");
    assert_eq!(out(&env, &["exec", &fork, "--", "cat", "gen.txt"]), "gen\n");
    assert_eq!(
        out(
            &env,
            &[
                "exec",
                &fork,
                "--",
                "git",
                "symbolic-ref",
                "--short",
                "HEAD"
            ]
        ),
        format!("agentbox/{fork}\n")
    );
    env.ok(&["destroy", &fork]);

    // A tournament of Docker forks; the winner's work moves into the source.
    let t = env.json(&[
        "tournament",
        &name,
        "--test",
        "read x < a.txt && test \"$x\" = good",
        "-c",
        "bad=echo bad > a.txt",
        "-c",
        "good=echo good > a.txt",
        "--keep",
    ]);
    assert_eq!(t["winner"], "good", "{t}");
    assert_eq!(out(&env, &["exec", &name, "--", "cat", "a.txt"]), "good\n");

    // A checkpoint is an image; a box made from it starts warm on its own branch.
    let c = env.json(&["checkpoint", "create", &name, "--name", "warm"]);
    assert_eq!(c["provider"], "docker", "{c}");
    let tag = c["held"]["image"].as_str().expect("image").to_owned();
    assert!(
        tag.starts_with("agentbox-ckpt-p") && tag.ends_with(":warm"),
        "{tag}"
    );
    assert!(engine.image(&tag).expect("inspect").is_some());
    let listed = env.json(&["checkpoint", "ls", "--all"]);
    assert!(listed.to_string().contains("\"warm\""), "{listed}");
    let new = format!("{name}-n");
    env.run_in(&project, &["create", "--checkpoint", "warm", &new]);
    assert_eq!(
        out(&env, &["exec", &new, "--", "cat", "deps/lib.txt"]),
        "warm\n"
    );
    assert_eq!(out(&env, &["exec", &new, "--", "cat", "a.txt"]), "one\n");
    assert_eq!(
        out(
            &env,
            &["exec", &new, "--", "git", "symbolic-ref", "--short", "HEAD"]
        ),
        format!("agentbox/{new}\n")
    );
    env.ok(&["checkpoint", "rm", "warm"]);
    assert!(engine.image(&tag).expect("inspect").is_none());

    for b in [&new, &name] {
        env.ok(&["destroy", b]);
    }
    env.ok(&["gc"]);
    env.ok(&["prune", "--min-age", "0"]);
    assert_eq!(on_engine(&engine, &home), (0, 0));
}
