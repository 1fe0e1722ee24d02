//! The fingerprint (the scan a watcher falls back to) changes with each kind of change and
//! is stable otherwise.

use super::*;

#[test]
fn fingerprint_changes_on_each_kind_of_change_and_is_stable_otherwise() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("src/a.txt"), "aaaa");
    write(&root.join("src/b.txt"), "bbbb");
    fs_err::create_dir_all(root.join("tmp")).expect("mkdir");
    let ignore = patterns(&["tmp", "*.log"]);
    let mut fp = Fp {
        root,
        last: fingerprint(root, &ignore).expect("fingerprint"),
        ignore,
    };
    fp.unchanged("nothing");
    // Reading does not count.
    fs_err::read(root.join("src/a.txt")).expect("read");
    fp.unchanged("a read");

    write(&root.join("src/c.txt"), "c");
    fp.changed("create");
    append(&root.join("src/c.txt"), "more");
    fp.changed("append");
    write(&root.join("src/a.txt"), "AAAA");
    fp.changed("rewrite keeping the size");
    fs_err::set_permissions(
        root.join("src/a.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    fp.changed("chmod file");
    fs_err::set_permissions(root.join("src"), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    fp.changed("chmod directory");
    fs_err::set_permissions(root, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    fp.changed("chmod of the root");
    fs_err::rename(root.join("src/c.txt"), root.join("src/d.txt")).expect("rename");
    fp.changed("rename");
    fs_err::remove_file(root.join("src/d.txt")).expect("rm");
    fp.changed("delete");
    fs_err::create_dir(root.join("src/empty")).expect("mkdir");
    fp.changed("mkdir");
    fs_err::remove_dir(root.join("src/empty")).expect("rmdir");
    fp.changed("rmdir");
    std::os::unix::fs::symlink("a.txt", root.join("src/link")).expect("symlink");
    fp.changed("symlink");
    fs_err::hard_link(root.join("src/b.txt"), root.join("src/b2.txt")).expect("link");
    fp.changed("hard link");
    fs_err::remove_file(root.join("src/b2.txt")).expect("rm");
    fp.changed("unlink of a hard link (the other name's ctime)");
    fs_err::write(root.join("src/b.txt"), "bbbb").expect("write same");
    fp.changed("rewrite with identical content (mtime)");
    rustix::fs::setxattr(
        root.join("src/b.txt"),
        "user.agentbox.test",
        b"1",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("setxattr");
    fp.changed("xattr");
    {
        let f = fs_err::File::create(root.join("src/a.txt")).expect("truncate");
        f.set_len(0).expect("truncate");
    }
    fp.changed("truncate");

    write(&root.join("tmp/x"), "x");
    fs_err::create_dir_all(root.join("tmp/d/e")).expect("mkdir");
    write(&root.join("src/out.log"), "log");
    append(&root.join("src/out.log"), "more");
    fp.unchanged("changes to ignored paths only");
}

// ------------------------------------------------------------------------------------------
