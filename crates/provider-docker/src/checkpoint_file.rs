//! A Docker checkpoint's image moved between engines as a file (`checkpoint export` /
//! `checkpoint import`, see `agentbox_boxes::checkpoints::held_transfer`): saved by id
//! through the engine (`docker save`: every layer, no tag), loaded through the target
//! engine (`docker load`) after the tar is checked on the host, then named
//! `agentbox-ckpt-<project key>:<name>` there.
//!
//! The check before a load: the tar's `manifest.json` (at most [`MAX_INDEX`] bytes) lists
//! exactly one image, whose configuration is the id the checkpoint's manifest records —
//! by name and by content (its sha256) — and no tag. The engine is not given that tar: it
//! is given one written on the host holding only that configuration, the layers the
//! manifest names and a `manifest.json` written here, so a second manifest, an
//! `index.json` or a `repositories` file that would name images on the engine
//! (`ubuntu:latest`, say, or another project's checkpoint) never reaches it; a tar with a
//! name twice or not plain, or a member other than a file, directory or link, is refused.
//! After the load, the engine must say it loaded that id only, and have it (it checked
//! each layer against the configuration). A failure removes what the import made on the
//! engine: the tag, and the image unless the engine had it before.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

use sha2::Digest;

use agentbox_boxes::provider::HeldCheckpoint;
use agentbox_boxes::{BoxError, Result};

use crate::errors::remote;
use crate::names;
use crate::provider::DockerProvider;

/// The most a saved image's `manifest.json` may hold.
pub const MAX_INDEX: u64 = 1 << 20;
/// The most a saved image's configuration may hold.
pub const MAX_CONFIG: u64 = 16 << 20;
/// The most layers a saved image may have.
pub const MAX_LAYERS: usize = 1000;
/// The most members a saved tar may have.
pub const MAX_MEMBERS: usize = 100_000;

fn bad(path: &Path, why: impl Into<String>) -> BoxError {
    BoxError::Store(agentbox_store::Error::Bundle {
        path: path.to_owned(),
        message: why.into(),
    })
}

/// Save checkpoint `held`'s image (of project `project`) to the new file `dest`, at most
/// `max` bytes; its size.
pub fn save(
    p: &DockerProvider,
    project: Option<&Path>,
    held: &HeldCheckpoint,
    dest: &Path,
    max: u64,
) -> Result<u64> {
    let engine = p.engine(held.engine.as_deref(), project)?;
    engine.save_image(&held.image_id, dest, max).map_err(remote)
}

/// Load the saved image `src` on project `project`'s engine as checkpoint `name` of the
/// project whose key is `project_key`, after checking it holds image `image_id` only (see
/// the module's documentation).
pub fn load(
    p: &DockerProvider,
    project: Option<&Path>,
    project_key: &str,
    name: &str,
    src: &Path,
    image_id: &str,
) -> Result<HeldCheckpoint> {
    crate::checkpoint::check_tag(name)?;
    let clean = check_saved(src, image_id)?;
    let engine = p.engine(None, project)?;
    let repo = names::checkpoint_repo(project_key);
    let tag = format!("{repo}:{name}");
    if engine.image(&tag).map_err(remote)?.is_some() {
        return Err(BoxError::CheckpointExists {
            name: name.to_owned(),
        });
    }
    let had = engine.image(image_id).map_err(remote)?.is_some();
    let made = (|| -> Result<()> {
        let loaded = engine.load_images(clean.path()).map_err(remote)?;
        if loaded.is_empty() || loaded.iter().any(|l| l != image_id) {
            return Err(bad(
                src,
                format!("the engine loaded {loaded:?} from it, not image {image_id}"),
            ));
        }
        match engine.image(image_id).map_err(remote)? {
            Some(i) if i.id == image_id => {}
            _ => {
                return Err(bad(
                    src,
                    format!("the engine did not load image {image_id} from it"),
                ))
            }
        }
        engine.tag_image(image_id, &repo, name).map_err(remote)
    })();
    if let Err(e) = made {
        let _ = engine.remove_image(&tag);
        if !had {
            let _ = engine.remove_image(image_id);
        }
        return Err(e);
    }
    Ok(HeldCheckpoint {
        engine: None,
        image: tag,
        image_id: image_id.to_owned(),
    })
}

/// Check that the `docker save` tar `src` holds image `image_id` only, with no tag, and
/// write the tar the engine is given in its stead: in `src`'s directory, holding only that
/// image's configuration and layers, by the names the manifest gives them, and a
/// `manifest.json` written here (one image, no tag). The engine never sees a member of
/// `src` the check did not vouch for: not a second `manifest.json`, not an `index.json` or
/// `repositories` naming images, not a link.
///
/// Refused: a member name that is not plain (`./x`, `a//b`, `..`, absolute, not UTF-8), a
/// name twice, a member other than a file, a directory or a link (a link a layer's name
/// resolves through is followed once, inside the tar), a configuration whose sha256 is not
/// `image_id`, more than [`MAX_LAYERS`] layers or [`MAX_MEMBERS`] members.
fn check_saved(src: &Path, image_id: &str) -> Result<tempfile::NamedTempFile> {
    let Some(want) = image_id.strip_prefix("sha256:") else {
        return Err(bad(src, format!("{image_id:?} is not an image id")));
    };
    if want.len() != 64 || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(src, format!("{image_id:?} is not an image id")));
    }
    let (members, text) = index_saved(src)?;
    let text = text.ok_or_else(|| bad(src, "not a saved image (it has no manifest.json)"))?;
    let listed: Vec<SavedImage> = serde_json::from_slice(&text).map_err(|e| {
        bad(
            src,
            format!("the saved image's manifest.json is not valid: {e}"),
        )
    })?;
    let [one] = listed.as_slice() else {
        return Err(bad(
            src,
            format!("it holds {} images, not the checkpoint's one", listed.len()),
        ));
    };
    if !one.repo_tags.as_deref().unwrap_or_default().is_empty() {
        return Err(bad(
            src,
            "its image carries names (a checkpoint's image is saved without any)",
        ));
    }
    // `blobs/sha256/<hex>` (OCI layout) or `<hex>.json` (older engines).
    let config = one.config.rsplit('/').next().unwrap_or_default();
    let config = config.strip_suffix(".json").unwrap_or(config);
    if config != want {
        return Err(bad(
            src,
            format!("its image is sha256:{config}, not the checkpoint's {image_id}"),
        ));
    }
    if one.layers.len() > MAX_LAYERS {
        return Err(bad(src, format!("its image has over {MAX_LAYERS} layers")));
    }
    let config_file = resolve(src, &members, &one.config)?;
    let layers = one
        .layers
        .iter()
        .map(|l| resolve(src, &members, l))
        .collect::<Result<Vec<_>>>()?;
    let mut wanted: std::collections::HashSet<&str> = layers.iter().map(String::as_str).collect();
    wanted.insert(&config_file);

    let dir = src.parent().unwrap_or(Path::new("."));
    let out = tempfile::Builder::new()
        .prefix(".agentbox-load-")
        .tempfile_in(dir)?;
    let mut tar_out = tar::Builder::new(std::io::BufWriter::new(out.reopen()?));
    let mut config_seen = false;
    let mut tar = tar::Archive::new(fs_err::File::open(src)?);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let name = plain_name(src, &entry)?;
        if !wanted.contains(name.as_str()) {
            continue;
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        if name == config_file {
            let mut data = Vec::new();
            (&mut entry).take(MAX_CONFIG + 1).read_to_end(&mut data)?;
            if data.len() as u64 > MAX_CONFIG {
                return Err(bad(src, "its image's configuration is too large"));
            }
            let got = hex(&sha2::Sha256::digest(&data));
            if got != want {
                return Err(bad(
                    src,
                    format!(
                        "its image's configuration is sha256:{got}, not the checkpoint's \
                         {image_id}"
                    ),
                ));
            }
            config_seen = true;
            header.set_size(data.len() as u64);
            header.set_cksum();
            tar_out.append_data(&mut header, &name, data.as_slice())?;
        } else {
            header.set_size(entry.size());
            header.set_cksum();
            tar_out.append_data(&mut header, &name, &mut entry)?;
        }
    }
    if !config_seen {
        return Err(bad(src, "its image's configuration is missing"));
    }
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": config_file,
        "RepoTags": null,
        "Layers": layers,
    }]))
    .map_err(std::io::Error::other)?;
    let mut header = tar::Header::new_gnu();
    header.set_size(manifest.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar_out.append_data(&mut header, "manifest.json", manifest.as_slice())?;
    let mut w = tar_out.into_inner()?;
    w.flush()?;
    w.into_inner()
        .map_err(|e| std::io::Error::other(e.error().to_string()))?
        .sync_all()?;
    Ok(out)
}

/// What a member of a saved tar is.
enum Member {
    File,
    Dir,
    /// A link to the member of this (plain) name.
    Link(String),
}

/// A saved tar's members by (plain) name.
type Members = HashMap<String, Member>;

/// The members of the saved tar `src` by name, and its `manifest.json` (bounded); a name
/// twice, a name not plain or a member of another kind is refused.
fn index_saved(src: &Path) -> Result<(Members, Option<Vec<u8>>)> {
    let mut members = HashMap::new();
    let mut manifest = None;
    let mut tar = tar::Archive::new(fs_err::File::open(src)?);
    for entry in tar.entries()? {
        let mut entry = entry?;
        if members.len() >= MAX_MEMBERS {
            return Err(bad(src, format!("it has over {MAX_MEMBERS} members")));
        }
        let name = plain_name(src, &entry)?;
        let kind = entry.header().entry_type();
        let member = match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => Member::File,
            tar::EntryType::Directory => Member::Dir,
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad(src, format!("its link {name:?} names nothing")))?;
                let target = std::str::from_utf8(&target)
                    .map_err(|_| bad(src, format!("its link {name:?} is not UTF-8")))?;
                // A symbolic link is relative to its directory, a hard one to the tar's root.
                let base = match kind {
                    tar::EntryType::Symlink => name.rsplit_once('/').map_or("", |(d, _)| d),
                    _ => "",
                };
                Member::Link(
                    join_inside(base, target)
                        .ok_or_else(|| bad(src, format!("its link {name:?} leads out of it")))?,
                )
            }
            other => {
                return Err(bad(
                    src,
                    format!("its member {name:?} is of a kind a saved image has not ({other:?})"),
                ))
            }
        };
        if name == "manifest.json" {
            if !matches!(member, Member::File) {
                return Err(bad(src, "its manifest.json is not a file"));
            }
            let mut text = Vec::new();
            (&mut entry).take(MAX_INDEX + 1).read_to_end(&mut text)?;
            if text.len() as u64 > MAX_INDEX {
                return Err(bad(src, "the saved image's manifest.json is too large"));
            }
            manifest = Some(text);
        }
        if members.insert(name.clone(), member).is_some() {
            return Err(bad(src, format!("it has {name:?} twice")));
        }
    }
    Ok((members, manifest))
}

/// The plain name of member `entry` of `src`: relative, UTF-8, no `.`, `..` or empty part
/// (a directory's one trailing `/` aside).
fn plain_name(src: &Path, entry: &tar::Entry<impl Read>) -> Result<String> {
    let raw = entry.path_bytes();
    let name = std::str::from_utf8(&raw)
        .map_err(|_| bad(src, "it has a member whose name is not UTF-8"))?;
    let trimmed = match entry.header().entry_type() {
        tar::EntryType::Directory => name.strip_suffix('/').unwrap_or(name),
        _ => name,
    };
    let plain = !trimmed.is_empty()
        && trimmed.len() <= 4096
        && trimmed
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'));
    if !plain {
        return Err(bad(src, format!("its member name {name:?} is not plain")));
    }
    Ok(trimmed.to_owned())
}

/// `target` taken from directory `base` (both inside the tar), as a plain name; `None` if
/// it leads out of the tar.
fn join_inside(base: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|c| !c.is_empty()).collect();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The name of the file member `name` (a name the manifest gives) is, following a link
/// once.
fn resolve(src: &Path, members: &Members, name: &str) -> Result<String> {
    let missing = || bad(src, format!("its image's {name:?} is not in it"));
    match members.get(name).ok_or_else(missing)? {
        Member::File => Ok(name.to_owned()),
        Member::Link(to) => match members.get(to) {
            Some(Member::File) => Ok(to.clone()),
            _ => Err(bad(src, format!("its image's {name:?} is not a file"))),
        },
        Member::Dir => Err(bad(src, format!("its image's {name:?} is not a file"))),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One image of a saved tar's `manifest.json`.
#[derive(serde::Deserialize)]
struct SavedImage {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &[u8] = br#"{"rootfs":{"type":"layers","diff_ids":[]}}"#;

    fn id() -> String {
        hex(&sha2::Sha256::digest(CONFIG))
    }

    /// A tar of `members` (name, content), names as given.
    fn tar_of(members: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("tmp");
        let mut b = tar::Builder::new(f.reopen().expect("reopen"));
        for (name, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // The name as is (`append_data` would make `./x` plain).
            h.as_gnu_mut().expect("gnu").name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, *data).expect("append");
        }
        b.finish().expect("finish");
        f
    }

    fn saved(manifest: &str) -> tempfile::NamedTempFile {
        let config = format!("blobs/sha256/{}", id());
        tar_of(&[
            (&config, CONFIG),
            ("blobs/sha256/l1", b"layer"),
            ("manifest.json", manifest.as_bytes()),
        ])
    }

    fn names(f: &Path) -> Vec<(String, Vec<u8>)> {
        let mut tar = tar::Archive::new(std::fs::File::open(f).expect("open"));
        tar.entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("entry");
                let mut data = Vec::new();
                e.read_to_end(&mut data).expect("read");
                (e.path().expect("path").display().to_string(), data)
            })
            .collect()
    }

    #[test]
    fn a_saved_image_must_be_the_checkpoints_one_and_untagged() {
        let id = id();
        let image_id = format!("sha256:{id}");
        let good = format!(
            r#"[{{"Config":"blobs/sha256/{id}","RepoTags":null,"Layers":["blobs/sha256/l1"]}}]"#
        );
        let ok = saved(&good);
        let clean = check_saved(ok.path(), &image_id).expect("the checkpoint's image");
        let got = names(clean.path());
        let got: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            got,
            [
                format!("blobs/sha256/{id}").as_str(),
                "blobs/sha256/l1",
                "manifest.json"
            ]
        );
        let old = tar_of(&[
            (&format!("{id}.json"), CONFIG),
            (
                "manifest.json",
                format!(r#"[{{"Config":"{id}.json"}}]"#).as_bytes(),
            ),
        ]);
        check_saved(old.path(), &image_id).expect("an older engine's layout");
        let other = "0".repeat(64);
        for (manifest, why) in [
            (
                format!(r#"[{{"Config":"blobs/sha256/{other}","Layers":[]}}]"#),
                "not the checkpoint's",
            ),
            (
                format!(r#"[{{"Config":"blobs/sha256/{id}","RepoTags":["ubuntu:latest"]}}]"#),
                "carries names",
            ),
            (
                format!(r#"[{{"Config":"blobs/sha256/{id}"}},{{"Config":"blobs/sha256/{id}"}}]"#),
                "holds 2 images",
            ),
            (
                format!(r#"[{{"Config":"blobs/sha256/{id}","Layers":["blobs/sha256/l2"]}}]"#),
                "is not in it",
            ),
            ("{".into(), "not valid"),
        ] {
            let f = saved(&manifest);
            let e = check_saved(f.path(), &image_id)
                .expect_err(&manifest)
                .to_string();
            assert!(e.contains(why), "{manifest}: {e}");
        }
    }

    #[test]
    fn a_saved_tar_with_a_second_manifest_or_odd_names_is_refused() {
        let id = id();
        let image_id = format!("sha256:{id}");
        let config = format!("blobs/sha256/{id}");
        let good = format!(r#"[{{"Config":"{config}","Layers":[]}}]"#);
        let tagged = format!(r#"[{{"Config":"{config}","RepoTags":["victim:latest"]}}]"#);
        for (members, why) in [
            (
                vec![
                    (config.as_str(), CONFIG),
                    ("manifest.json", good.as_bytes()),
                    ("manifest.json", tagged.as_bytes()),
                ],
                "twice",
            ),
            (
                vec![
                    (config.as_str(), CONFIG),
                    ("manifest.json", good.as_bytes()),
                    ("./manifest.json", tagged.as_bytes()),
                ],
                "not plain",
            ),
            (
                vec![
                    (config.as_str(), CONFIG),
                    ("manifest.json", good.as_bytes()),
                    ("blobs//x", b"x"),
                ],
                "not plain",
            ),
        ] {
            let f = tar_of(&members);
            let e = check_saved(f.path(), &image_id).expect_err(why).to_string();
            assert!(e.contains(why), "{e}");
        }
        // What the manifest does not name never reaches the engine.
        let f = tar_of(&[
            (config.as_str(), CONFIG),
            ("manifest.json", good.as_bytes()),
            ("index.json", b"{}"),
            ("repositories", br#"{"victim":{"latest":"x"}}"#),
        ]);
        let clean = check_saved(f.path(), &image_id).expect("clean");
        let got = names(clean.path());
        assert_eq!(
            got.len(),
            2,
            "{:?}",
            got.iter().map(|g| &g.0).collect::<Vec<_>>()
        );
        assert_eq!(got[1].1, br#"[{"Config":"blobs/sha256/"#.iter().chain(id.as_bytes()).chain(br#"","Layers":[],"RepoTags":null}]"#).copied().collect::<Vec<u8>>());
    }

    #[test]
    fn a_configuration_must_hash_to_the_image_id() {
        let other = "1".repeat(64);
        let f = tar_of(&[
            (&format!("{other}.json"), CONFIG),
            (
                "manifest.json",
                format!(r#"[{{"Config":"{other}.json"}}]"#).as_bytes(),
            ),
        ]);
        let e = check_saved(f.path(), &format!("sha256:{other}"))
            .expect_err("a configuration named after another image")
            .to_string();
        assert!(e.contains("configuration is sha256:"), "{e}");
    }

    #[test]
    fn links_resolve_inside_the_tar_only() {
        assert_eq!(join_inside("a", "../b/c").as_deref(), Some("b/c"));
        assert_eq!(join_inside("a", "../../b"), None);
        assert_eq!(join_inside("", "/etc/passwd"), None);
    }
}
