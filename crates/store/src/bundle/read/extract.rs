//! Writing one layer entry to disk ([`State::extract`]): path and type checks, PAX
//! attributes (times, sparse maps, xattrs, hashes), and the xattrs that are dropped.

use super::*;

impl State<'_> {
    pub(super) fn extract<R: Read>(
        &mut self,
        id: &str,
        name: &str,
        comps: Vec<OsString>,
        e: &mut tar::Entry<'_, R>,
    ) -> Result<()> {
        let rel: PathBuf = comps.iter().collect();
        let h = e.header().clone();
        let typ = h.entry_type();
        let mut pax: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some(exts) = e
            .pax_extensions()
            .map_err(|err| self.bad_entry(name, format!("reading PAX records: {err}")))?
        {
            for x in exts {
                let x = x.map_err(|err| self.bad_entry(name, format!("bad PAX record: {err}")))?;
                let key = x
                    .key()
                    .map_err(|err| self.bad_entry(name, format!("bad PAX key: {err}")))?;
                pax.push((key.to_owned(), x.value_bytes().to_vec()));
            }
        }
        let get = |k: &str| pax.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let perm = h.mode().map_err(|err| self.bad_entry(name, err))? & 0o7777;
        let uid = h.uid().map_err(|err| self.bad_entry(name, err))?;
        let gid = h.gid().map_err(|err| self.bad_entry(name, err))?;
        let (mtime_sec, mtime_nsec) = match get("mtime") {
            Some(v) => parse_time(&v).ok_or_else(|| self.bad_entry(name, "bad PAX mtime"))?,
            None => (
                h.mtime().map_err(|err| self.bad_entry(name, err))? as i64,
                0,
            ),
        };
        let mut xattrs = std::collections::BTreeMap::new();
        for (k, v) in &pax {
            if let Some(x) = k.strip_prefix(PAX_XATTR_PREFIX) {
                xattrs.insert(x.to_owned(), v.clone());
            } else if let Some(x) = k.strip_prefix(PAX_XATTR_HEX_PREFIX) {
                let value = decode_hex(v)
                    .ok_or_else(|| self.bad_entry(name, format!("bad hex value of xattr {x}")))?;
                xattrs.insert(x.to_owned(), value);
            }
        }
        let strict_kind = self.kind != BundleKind::Rootfs;
        let opts = *self.opts;
        let src = self.src.to_owned();
        let bad_entry = |m: String| bad(&src, format!("entry {name}: {m}"));
        let Some(ns) = self.nodes.get_mut(id) else {
            return Err(bad_entry("unknown layer".to_owned()));
        };
        // Every check below runs for a held node too; only the writes are left out.
        let write = !ns.held;
        let is_root = rel.as_os_str().is_empty();
        if is_root {
            if !typ.is_dir() {
                return Err(bad_entry("the layer root must be a directory".to_owned()));
            }
            if ns.root_seen {
                return Err(bad_entry("duplicate entry".to_owned()));
            }
            ns.root_seen = true;
        } else {
            if ns.kinds.contains_key(&rel) {
                return Err(bad_entry("duplicate entry".to_owned()));
            }
            let parent = rel.parent().map(Path::to_owned).unwrap_or_default();
            match ns.kinds.get(&parent) {
                Some(Kind::Dir) => {}
                Some(k) => {
                    return Err(bad_entry(format!(
                        "its parent {} is a {k:?}, not a directory (symlinks are never followed)",
                        parent.display()
                    )))
                }
                None if ns.strict => {
                    return Err(bad_entry(format!(
                        "its parent directory {} is not an earlier entry of the layer",
                        parent.display()
                    )))
                }
                None => {
                    let mut acc = PathBuf::new();
                    for c in parent.components() {
                        acc.push(c);
                        match ns.kinds.get(&acc) {
                            Some(Kind::Dir) => {}
                            Some(k) => {
                                return Err(bad_entry(format!(
                                    "its ancestor {} is a {k:?}, not a directory (symlinks are never followed)",
                                    acc.display()
                                )))
                            }
                            None => {
                                let p = ns.dir.join(&acc);
                                if write {
                                    let what = format!("entry {name}: creating a parent");
                                    DirBuilder::new()
                                        .mode(0o755)
                                        .create(&p)
                                        .map_err(|err| io_fail(&src, &p, &what, err))?;
                                }
                                ns.kinds.insert(acc.clone(), Kind::Dir);
                            }
                        }
                    }
                }
            }
            // Entries come directory by directory: a parent checked for the previous entry
            // needs no second look.
            if write && ns.checked_parent.as_ref() != Some(&parent) {
                let pmd = std::fs::symlink_metadata(ns.dir.join(&parent))
                    .map_err(|err| bad_entry(format!("lstat of its parent: {err}")))?;
                if !pmd.is_dir() {
                    return Err(bad_entry("its parent is not a real directory".to_owned()));
                }
                ns.checked_parent = Some(parent);
            }
        }
        let target = fsutil::join(&ns.dir, &rel);
        let ioe = |what: &str, err: io::Error| {
            if io_is_no_space(&err) {
                Error::NoSpace {
                    path: target.clone(),
                    detail: format!("entry {name}: {what}: {err}"),
                }
            } else {
                bad(&src, format!("entry {name}: {what}: {err}"))
            }
        };
        let mut record = Record {
            rel: rel.as_os_str().as_bytes().to_vec(),
            typ: b'0',
            perm,
            uid,
            gid,
            mtime_sec,
            mtime_nsec,
            size: 0,
            link: Vec::new(),
            major: 0,
            minor: 0,
            xattrs: xattrs.clone(),
        };
        if get(PAX_TYPE).is_some() && !typ.is_fifo() {
            return Err(bad_entry(format!("{PAX_TYPE} on a non-fifo entry")));
        }
        let kind: Kind;
        let mut hardlink = false;
        // A regular file stays open for its metadata, which is then set through the
        // descriptor (no path lookup per call).
        let mut file: Option<File> = None;
        if typ.is_file() || typ.is_contiguous() || typ.is_gnu_sparse() {
            kind = Kind::File;
            let f = if write {
                Some(
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                        .open(&target)
                        .map_err(|err| ioe("create", err))?,
                )
            } else {
                None
            };
            let payload = e.size();
            if let Some((left, limit)) = self.budget.remaining() {
                if payload > left {
                    return Err(too_large(
                        &src,
                        limit,
                        &opts,
                        &format!(
                            "entry {name} declares {payload} bytes, refused before writing it"
                        ),
                    ));
                }
            }
            let sparse = match get(PAX_SPARSE) {
                Some(v) => {
                    let (size, segs) =
                        parse_sparse(&v).ok_or_else(|| bad_entry("bad sparse map".to_owned()))?;
                    if segs.iter().map(|(_, l)| l).sum::<u64>() != payload {
                        return Err(bad_entry(
                            "sparse map does not add up to the stored size".to_owned(),
                        ));
                    }
                    Some((size, segs))
                }
                None => None,
            };
            let segs = match &sparse {
                Some((_, s)) => s.clone(),
                None => vec![(0, payload)],
            };
            let mut hasher = blake3::Hasher::new();
            let buf = &mut self.buf;
            for (off, len) in segs {
                let mut done = 0u64;
                while done < len {
                    let want = (len - done).min(buf.len() as u64) as usize;
                    let n = e
                        .read(&mut buf[..want])
                        .map_err(|err| ioe("reading content (truncated or corrupt)", err))?;
                    if n == 0 {
                        return Err(bad_entry(
                            "truncated: the archive ends inside the file's content".to_owned(),
                        ));
                    }
                    hasher.update(&buf[..n]);
                    if let Some(f) = &f {
                        f.write_all_at(&buf[..n], off + done)
                            .map_err(|err| ioe("write", err))?;
                    }
                    done += n as u64;
                }
            }
            let size = match sparse {
                Some((size, _)) => size,
                None => payload,
            };
            if let Some(f) = &f {
                if sparse.is_some() {
                    f.set_len(size).map_err(|err| ioe("set length", err))?;
                }
                if payload >= WRITEBACK_EARLY {
                    // Start the device writes of a big file now, so they overlap the rest of
                    // the unpacking instead of all waiting for the flush that makes the
                    // import durable. Only a hint: that flush reports any write error.
                    let _ = agentbox_sys::writeback::start(f);
                }
            }
            match get(PAX_BLAKE3) {
                Some(want) => {
                    let got = hasher.finalize().to_hex();
                    if want != got.as_bytes() {
                        return Err(bad_entry(format!(
                            "checksum mismatch: content hashes to {got}, the archive records {}",
                            String::from_utf8_lossy(&want)
                        )));
                    }
                }
                None if strict_kind => {
                    return Err(bad_entry(format!("no {PAX_BLAKE3} record")));
                }
                None => {}
            }
            record.size = size;
            file = f;
        } else if typ.is_hard_link() {
            kind = Kind::File;
            hardlink = true;
            record.typ = b'1';
            record.xattrs.clear();
            let link = e
                .link_name_bytes()
                .ok_or_else(|| bad_entry("hardlink without a target".to_owned()))?
                .into_owned();
            let shown = String::from_utf8_lossy(&link).into_owned();
            let lc = components(&link)
                .map_err(|m| bad_entry(format!("hardlink target {shown}: {m}")))?;
            let inner: Vec<OsString> = if strict_kind {
                if lc.len() < 3 || lc[0] != OsStr::new(NODES_DIR) || lc[1] != OsStr::new(id) {
                    return Err(bad_entry(format!(
                        "hardlink target {shown} is outside node {id}"
                    )));
                }
                lc[2..].to_vec()
            } else {
                lc
            };
            let trel: PathBuf = inner.iter().collect();
            match ns.kinds.get(&trel) {
                Some(Kind::Dir) | None => {
                    return Err(bad_entry(format!(
                        "hardlink target {shown} is not an earlier non-directory entry of the layer"
                    )))
                }
                Some(_) => {}
            }
            if write {
                std::fs::hard_link(ns.dir.join(&trel), &target)
                    .map_err(|err| ioe("hardlink", err))?;
            }
            record.link = trel.as_os_str().as_bytes().to_vec();
            ns.kinds.insert(rel.clone(), Kind::File);
        } else if typ.is_symlink() {
            kind = Kind::Symlink;
            record.typ = b'2';
            let link = e
                .link_name_bytes()
                .ok_or_else(|| bad_entry("symlink without a target".to_owned()))?
                .into_owned();
            if link.is_empty() {
                return Err(bad_entry("symlink with an empty target".to_owned()));
            }
            // Any target is fine: a symlink is data. Nothing is ever created through one
            // (parents must be real directories extracted earlier, files are opened with
            // O_NOFOLLOW, hardlink targets are earlier non-directory entries).
            if write {
                std::os::unix::fs::symlink(OsStr::from_bytes(&link), &target)
                    .map_err(|err| ioe("symlink", err))?;
            }
            record.link = link;
        } else if typ.is_dir() {
            kind = Kind::Dir;
            record.typ = b'5';
            if write && !is_root {
                DirBuilder::new()
                    .mode(0o700)
                    .create(&target)
                    .map_err(|err| ioe("mkdir", err))?;
            }
        } else if typ.is_fifo() {
            (kind, record.typ) = match get(PAX_TYPE) {
                None => (Kind::Fifo, b'6'),
                Some(t) if t == PAX_TYPE_SOCKET.as_bytes() => (Kind::Socket, SOCKET_RECORD_TYPE),
                Some(t) => {
                    return Err(bad_entry(format!(
                        "unknown {PAX_TYPE} {:?}",
                        String::from_utf8_lossy(&t)
                    )))
                }
            };
            if write {
                fsutil::mknod(&target, kind, 0).map_err(|err| ioe("mknod", err))?;
            }
        } else if typ.is_character_special() || typ.is_block_special() {
            let (k, t) = if typ.is_character_special() {
                (Kind::CharDev, b'3')
            } else {
                (Kind::BlockDev, b'4')
            };
            if !opts.allow_devices {
                return Err(bad_entry(
                    "device nodes are refused (allow them explicitly to import)".to_owned(),
                ));
            }
            kind = k;
            record.typ = t;
            let major = h
                .device_major()
                .map_err(|err| ioe("device major", err))?
                .unwrap_or(0);
            let minor = h
                .device_minor()
                .map_err(|err| ioe("device minor", err))?
                .unwrap_or(0);
            record.major = major;
            record.minor = minor;
            if write {
                fsutil::mknod(&target, k, rustix::fs::makedev(major, minor))
                    .map_err(|err| ioe("mknod", err))?;
            }
        } else {
            return Err(bad_entry(format!(
                "unsupported tar entry type {:?}",
                typ.as_byte() as char
            )));
        }
        ns.kinds.insert(rel.clone(), kind);
        ns.entries += 1;
        record.hash_into(&mut ns.hasher);
        if hardlink {
            return Ok(());
        }
        let uid32 = u32::try_from(uid).map_err(|_| bad_entry(format!("uid {uid} out of range")))?;
        let gid32 = u32::try_from(gid).map_err(|_| bad_entry(format!("gid {gid} out of range")))?;
        if !write {
            return Ok(());
        }
        if opts.same_owner {
            match &file {
                Some(f) => fsutil::set_owner_fd(f, uid32, gid32),
                None => fsutil::set_owner(&target, uid32, gid32),
            }
            .map_err(|err| ioe("chown", err))?;
        }
        // What the archive says stays in the record (the checksum covers the archive as
        // written); what reaches the disk is filtered. Overlayfs-private attributes are never
        // applied: in a layer overlayfs obeys them (redirects to other paths, metacopy,
        // opaque, whiteouts), and the format carries whiteouts and opaque directories as its
        // own markers, which the store converts itself.
        let mut perm = perm;
        let mut stripped = false;
        if kind != Kind::Dir && kind != Kind::Symlink && !opts.allow_setuid && perm & 0o6000 != 0 {
            perm &= !0o6000;
            stripped = true;
        }
        for (k, v) in &xattrs {
            if is_overlay_xattr(k) {
                self.dropped_overlay_xattrs += 1;
                continue;
            }
            if k == CAPABILITY_XATTR && kind != Kind::Dir {
                if !opts.allow_setuid {
                    stripped = true;
                    continue;
                }
            } else if is_privileged_xattr(k) {
                // Only the host's privileged code sets these (security modules, overlayfs,
                // IMA/EVM); a bundle is a box's text, so none of them reaches the disk.
                self.dropped_privileged_xattrs += 1;
                continue;
            }
            match &file {
                Some(f) => xattr::FileExt::set_xattr(f, k, v),
                None => xattr::set(&target, k, v),
            }
            .map_err(|err| ioe(&format!("setting xattr {k}"), err))?;
        }
        if stripped {
            self.stripped_setuid += 1;
        }
        if kind == Kind::Dir {
            ns.dirs.push((rel, perm, mtime_sec, mtime_nsec));
            return Ok(());
        }
        if let Some(f) = &file {
            fsutil::set_perm_fd(f, perm).map_err(|err| ioe("chmod", err))?;
            fsutil::set_mtime_fd(f, mtime_sec, mtime_nsec).map_err(|err| ioe("set mtime", err))?;
            return Ok(());
        }
        if kind != Kind::Symlink {
            fsutil::set_perm(&target, perm).map_err(|err| ioe("chmod", err))?;
        }
        fsutil::set_mtime(&target, mtime_sec, mtime_nsec).map_err(|err| ioe("set mtime", err))?;
        Ok(())
    }
}
pub(super) fn parse_time(v: &[u8]) -> Option<(i64, i64)> {
    let s = std::str::from_utf8(v).ok()?;
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: i128 = int.parse().ok()?;
    let mut digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    while digits.len() < 9 {
        digits.push('0');
    }
    let nsec: i128 = digits.parse().ok()?;
    let mut total = sec * 1_000_000_000 + nsec;
    if neg {
        total = -total;
    }
    let s = total.div_euclid(1_000_000_000);
    let n = total.rem_euclid(1_000_000_000);
    Some((i64::try_from(s).ok()?, n as i64))
}

/// `size:off+len,...`
pub(super) fn parse_sparse(v: &[u8]) -> Option<(u64, Vec<(u64, u64)>)> {
    let s = std::str::from_utf8(v).ok()?;
    let (size, map) = s.split_once(':')?;
    let size: u64 = size.parse().ok()?;
    let mut segs = Vec::new();
    let mut end = 0u64;
    for seg in map.split(',').filter(|s| !s.is_empty()) {
        let (o, l) = seg.split_once('+')?;
        let (o, l): (u64, u64) = (o.parse().ok()?, l.parse().ok()?);
        let e = o.checked_add(l)?;
        if o < end || e > size {
            return None;
        }
        end = e;
        segs.push((o, l));
    }
    Some((size, segs))
}

/// The xattr holding a file's capabilities (what makes `ping` work without setuid).
const CAPABILITY_XATTR: &str = "security.capability";

/// An xattr of the `trusted.` or `security.` namespace: read by privileged code only
/// (overlayfs, security modules, IMA/EVM, file capabilities), and settable only with
/// `CAP_SYS_ADMIN` (trusted) or by the security module that owns the name.
pub(super) fn is_privileged_xattr(name: &str) -> bool {
    name.starts_with("trusted.") || name.starts_with("security.")
}

/// Decode lowercase or uppercase hex; `None` when malformed.
pub(super) fn decode_hex(v: &[u8]) -> Option<Vec<u8>> {
    if !v.len().is_multiple_of(2) {
        return None;
    }
    v.chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}
