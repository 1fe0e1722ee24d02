//! What the tests of this crate share: the test image (a root filesystem of the host's
//! static busybox, imported once per content on each engine), running containers of it,
//! and commands run in them.

use std::io::Write;

use agentbox_docker::container::{ContainerSpec, Limits};
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

const BUSYBOX: &str = "/bin/busybox";
pub const LABEL: &str = "agentbox.test";

/// The test image: a root filesystem of the host's static busybox, imported once per
/// content (its tag is the busybox binary's hash).
pub fn test_image(engine: &Engine) -> String {
    let bin = fs_err::read(BUSYBOX).expect("read busybox");
    let tag = blake3::hash(&bin).to_hex()[..16].to_owned();
    let name = format!("agentbox-test-busybox:{tag}");
    // Tests run in parallel processes: one imports, the others wait and find it (two
    // imports under one tag would leave the first one's image untagged behind).
    let lock = std::fs::File::create(std::env::temp_dir().join("agentbox-test-busybox.lock"))
        .expect("lock file");
    lock.lock().expect("lock");
    if engine.image(&name).expect("inspect").is_some() {
        return name;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let tar_path = dir.path().join("rootfs.tar");
    let mut b = tar::Builder::new(fs_err::File::create(&tar_path).expect("tar"));
    let mut dir_entry = |path: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, path, std::io::empty()).expect("dir");
    };
    for d in ["bin", "tmp", "etc", "proc", "sys", "dev", "workspace"] {
        dir_entry(d);
    }
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o755);
    h.set_size(bin.len() as u64);
    b.append_data(&mut h, "bin/busybox", bin.as_slice())
        .expect("busybox");
    for applet in [
        "sh", "cat", "echo", "grep", "sleep", "ls", "mkdir", "id", "env", "printf", "wc", "rm",
        "test", "true", "false", "kill",
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("applet");
    }
    b.into_inner().expect("finish").flush().expect("flush");
    let (repo, tag) = name.split_once(':').expect("tag");
    engine
        .import_rootfs(
            &tar_path,
            repo,
            tag,
            &["ENV PATH=/bin".into(), "WORKDIR /workspace".into()],
        )
        .expect("import");
    name
}

/// A running container of the test image, removed when dropped.
pub struct Running<'a> {
    pub engine: &'a Engine,
    pub name: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let _ = self.engine.remove_container(&self.name);
    }
}

pub fn running<'a>(engine: &'a Engine, test: &str, limits: Limits) -> Running<'a> {
    let image = test_image(engine);
    let name = format!("agentbox-test-{test}-{}", std::process::id());
    let _ = engine.remove_container(&name);
    let spec = ContainerSpec {
        name: name.clone(),
        image,
        cmd: vec!["sleep".into(), "3600".into()],
        labels: [(LABEL.to_owned(), test.to_owned())].into(),
        limits,
        workdir: Some("/workspace".into()),
        ..Default::default()
    };
    engine.create_container(&spec).expect("create");
    let r = Running { engine, name };
    engine.start_container(&r.name).expect("start");
    r
}

/// Run `argv` with `stdin`; (status, stdout, stderr).
pub fn run(
    engine: &Engine,
    container: &str,
    argv: &[&str],
    stdin: Option<&[u8]>,
) -> (i64, String, String) {
    let spec = ExecSpec {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let input =
        stdin.map(|s| Box::new(std::io::Cursor::new(s.to_vec())) as Box<dyn std::io::Read + Send>);
    let status = engine
        .exec(container, &spec, input, &mut out, &mut err)
        .expect("exec");
    (
        status,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}
