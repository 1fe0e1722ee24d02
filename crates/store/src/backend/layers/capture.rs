//! Capturing a commit: what changed in the upper directory since the last commit's marks
//! (the change check, [`LayersBackend::changed_in_upper`], and the scan it may hand to the
//! commit that follows, [`ScanMemo`]), written out as an overlay-format layer.

use super::*;
use std::collections::{HashMap, HashSet};

/// A change check's look at the upper directory ([`LayersBackend::changed_in_upper`]),
/// taken by the commit that follows it on the same thread, so that an auto-capture (check,
/// then commit) looks at the upper directory once: that look is most of what a command
/// costs in a box that wrote tens of thousands of files.
///
/// Taking an older scan is sound as long as the marks it was compared with are still the
/// last commit's: what changed after the scan differs from the marks the commit records for
/// it (those of the scan), so the next commit takes it. It is taken only if the upper
/// directory is the same file as when it was made (every reset replaces it), the marks
/// are of the same version (every commit makes a new one), at most once, and within
/// [`ScanMemo::FRESH`].
struct ScanMemo {
    upper: (PathBuf, Option<FileId>),
    made: std::time::Instant,
    prev: Arc<marks::Loaded>,
    scan: Scan,
}

thread_local! {
    static LAST_SCAN: std::cell::RefCell<Option<ScanMemo>> = const { std::cell::RefCell::new(None) };
}

/// Drop the change check's scan kept for the next commit on this thread (see
/// [`ScanMemo::keep`]).
pub(super) fn forget_kept_scan() {
    LAST_SCAN.with(|m| m.borrow_mut().take());
}

impl ScanMemo {
    /// A scan older than this is made again: a node shows the tree as the command left it.
    const FRESH: std::time::Duration = std::time::Duration::from_secs(1);

    /// Look at the whole upper directory, or with a hint made against the current marks,
    /// at the hinted paths only.
    pub(super) fn make(dirs: &WorkDirs, hint: Option<&ChangeHint>) -> Result<ScanMemo> {
        let upper = LayersBackend::upper(dirs);
        // Identity first: a change after it makes the memo look older, never newer.
        let id = file_id(&upper);
        let prev = marks::load(dirs)?;
        let scan = match hint.filter(|h| h.since == prev.version()) {
            Some(h) => marks::partial_scan(&upper, &prev.captured.marks, &h.paths)?,
            None => Scan::Full(marks::scan_marks(&upper)?),
        };
        Ok(ScanMemo {
            upper: (upper, id),
            made: std::time::Instant::now(),
            prev,
            scan,
        })
    }

    /// Keep this scan for the next commit on this thread.
    pub(super) fn keep(self) {
        LAST_SCAN.with(|m| *m.borrow_mut() = Some(self));
    }

    /// The kept scan, if it is of `dirs`'s upper directory as it is now named, against the
    /// marks now recorded, and fresh.
    pub(super) fn take(dirs: &WorkDirs) -> Result<Option<ScanMemo>> {
        let Some(memo) = LAST_SCAN.with(|m| m.borrow_mut().take()) else {
            return Ok(None);
        };
        let same_upper = memo.upper.0 == LayersBackend::upper(dirs)
            && memo.upper.1.is_some()
            && file_id(&memo.upper.0) == memo.upper.1;
        let ok = same_upper
            && memo.made.elapsed() <= Self::FRESH
            && marks::load(dirs)?.version() == memo.prev.version();
        Ok(ok.then_some(memo))
    }
}
impl LayersBackend {
    /// Walk the upper directory: every entry's relative path and mark, with its metadata.
    pub(super) fn scan_upper(dirs: &WorkDirs) -> Result<Tree> {
        scan_tree(&Self::upper(dirs))
    }

    pub(super) fn mark(meta: &Meta) -> Mark {
        Mark {
            ino: meta.ino,
            ctime: (meta.ctime_sec, meta.ctime_nsec),
            btime: meta.btime,
            whiteout: meta.is_whiteout(),
            dir: meta.kind == Kind::Dir,
        }
    }

    /// Build the layer that brings HEAD's chain up to the current upper directory, in
    /// `self.tmp_layer(id)`. Returns the marks to record once the commit is durable.
    pub(super) fn capture_changes(
        &self,
        dirs: &WorkDirs,
        id: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let dst = self.tmp_layer(id);
        self.remove_tree(&dst)?;
        fs_err::create_dir_all(&dst)?;
        Self::capture_into(dirs, &dst, self.opaque)
    }

    /// Write into the empty directory `dst` the overlay-format layer of what changed in the
    /// upper directory since the last commit: changed entries as they are, whiteouts for
    /// what vanished, opaque markers for directories captured the first time after they
    /// replaced a lower one. Returns the marks to record once the commit is durable, and
    /// the path of every entry written to `dst` (its listing, see `crate::listing`).
    pub(in crate::backend) fn capture_into(
        dirs: &WorkDirs,
        dst: &Path,
        opaque: &str,
    ) -> Result<(NewMarks, Vec<PathBuf>)> {
        let mut timer = agentbox_core::timing::Timer::start("capture");
        let planned = Self::plan_capture(dirs, opaque, &mut timer)?;
        // Copies of the box's files made while its command ran, when offered: in a plain
        // directory (a btrfs area is a snapshot, which only its own commit can take).
        let prestaged = crate::backend::prestage::offered().filter(|p| p.plain());
        let opts = CopyOpts {
            beneath: Some(planned.upper.clone()),
            prestaged: prestaged.clone(),
            ..copy_opts()
        };
        let stats = copy_tree(&planned.tree, dst, &opts)?;
        timer.lap(&format!(
            "copy ({} files, {} of them prestaged)",
            stats.files, stats.prestaged
        ));
        let written = |rel: &Path| prestaged.as_ref().is_some_and(|p| p.written(rel));
        write_out(&planned.tree, dst, &written)?;
        timer.lap("write out");
        Ok((
            NewMarks::Changes(planned.now),
            planned.tree.entries.into_keys().collect(),
        ))
    }

    /// What [`LayersBackend::capture_into`] writes, without writing it: the layer's tree
    /// (each entry's `src` in the upper directory, or the whiteout template for a removed
    /// path; opaque markers set), and the marks to record once the commit is durable. A
    /// backend that builds its layer otherwise (btrfs applies the tree to a snapshot of
    /// the previous layer) takes it from here, copying from below `upper` only.
    pub(in crate::backend) fn plan_capture(
        dirs: &WorkDirs,
        opaque: &str,
        timer: &mut agentbox_core::timing::Timer,
    ) -> Result<PlannedCapture> {
        // Only `lstat` per upper entry; full metadata (xattrs) is read just for what changed.
        let upper_dir = Self::upper(dirs);
        let kept = ScanMemo::take(dirs)?;
        let reused = kept.is_some();
        let memo = match kept {
            Some(memo) => memo,
            None => ScanMemo::make(dirs, None)?,
        };
        timer.lap(if reused {
            "the change check's scan"
        } else {
            "load marks and scan upper"
        });
        let prev = &memo.prev.captured;
        // The entries looked at, and the marked ones known gone (for a whole scan: every
        // marked path it did not find).
        let (marks, gone): (&BTreeMap<PathBuf, Mark>, Vec<&String>) = match &memo.scan {
            Scan::Full(marks) => (
                marks,
                marks::not_found(&prev.marks, marks)
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect(),
            ),
            Scan::Partial { present, gone } => (present, gone.iter().collect()),
        };
        // The metadata of every entry that will be taken (the changed ones and the
        // directories leading to them), read on all cores at once: one `openat2`, `statx`
        // and xattr read per entry is most of a large commit's planning, and a command
        // that installed thousands of files waits for it.
        // Hashed, not ordered: these are only looked up, and comparing paths component by
        // component was a good part of planning a commit of thousands of entries.
        let mut full: HashMap<PathBuf, Entry> = {
            let mut wanted: HashSet<&Path> = HashSet::new();
            for (rel, mark) in marks {
                let before = rel.to_str().and_then(|k| prev.marks.get(k));
                if !before.is_some_and(|b| b.same(mark)) {
                    for a in rel.ancestors() {
                        if !wanted.insert(a) {
                            break;
                        }
                    }
                }
            }
            let wanted: Vec<&Path> = wanted.into_iter().collect();
            read_metas_beneath(&upper_dir, &wanted)
        };
        timer.lap("read the changed entries");
        // `None`: the entry vanished since the scan (the box keeps writing during a commit).
        let mut entry_of = |rel: &Path| -> Result<Option<Entry>> {
            if let Some(e) = full.get(rel) {
                return Ok(Some(e.clone()));
            }
            // Box-controlled: never through a directory it swapped for a symlink.
            let meta = match crate::fsops::read_meta_beneath(&upper_dir, rel) {
                Ok(m) => m,
                Err(crate::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            };
            let e = Entry {
                rel: rel.to_owned(),
                meta,
                src: upper_dir.join(rel),
            };
            full.insert(rel.to_owned(), e.clone());
            Ok(Some(e))
        };
        let mut now = marks::Changes::default();
        let mut changed: BTreeSet<PathBuf> = BTreeSet::new();
        // Changed entries that hide everything below them in lower layers.
        let mut hiding: HashSet<PathBuf> = HashSet::new();
        let mut new_opaque: HashSet<PathBuf> = HashSet::new();
        for (rel, mark) in marks {
            if rel.as_os_str().is_empty() {
                continue;
            }
            let key = rel.to_str().map(str::to_owned);
            let before = key.as_ref().and_then(|k| prev.marks.get(k));
            if !before.is_some_and(|b| b.same(mark)) {
                changed.insert(rel.clone());
                // Opaque only the first time the directory is captured: later layers merge
                // with the layer that already hid the lower contents.
                let first_time = before.is_none_or(|b| b.replaced_by(mark));
                if mark.dir && first_time {
                    let Some(e) = entry_of(rel)? else {
                        continue;
                    };
                    if e.meta.xattrs.get(opaque).map(|v| v.as_slice()) == Some(b"y") {
                        new_opaque.insert(rel.clone());
                    }
                }
                if !mark.dir || new_opaque.contains(rel) {
                    hiding.insert(rel.clone());
                }
            }
            if let Some(k) = key.filter(|_| before != Some(mark)) {
                now.set.insert(k, *mark);
            }
        }
        // A changed file hard-linked to unchanged ones (the link was made before the last
        // commit, then one name moved or changed): its other names are taken too, so the
        // link lives inside this one layer. Left in an older layer, they would be separate
        // files after a checkout while the working tree shows one inode.
        // Only the changed files' inodes are looked for: the upper directory of a running
        // box holds everything it wrote, and a commit changes a few of them.
        let changed_inos: std::collections::HashSet<u64> = changed
            .iter()
            .filter_map(|rel| marks.get(rel).filter(|m| !m.dir && !m.whiteout))
            .map(|m| m.ino)
            .collect();
        let mut by_ino: std::collections::HashMap<u64, Vec<&PathBuf>> = Default::default();
        for (rel, mark) in marks {
            if !mark.dir
                && !mark.whiteout
                && changed_inos.contains(&mark.ino)
                && !rel.as_os_str().is_empty()
            {
                by_ino.entry(mark.ino).or_default().push(rel);
            }
        }
        let linked: Vec<PathBuf> = changed
            .iter()
            .filter_map(|rel| marks.get(rel).filter(|m| !m.dir && !m.whiteout))
            .filter_map(|m| by_ino.get(&m.ino).filter(|names| names.len() > 1))
            .flatten()
            .filter(|rel| !changed.contains(**rel))
            .map(|rel| (*rel).clone())
            .collect();
        for rel in linked {
            hiding.insert(rel.clone());
            changed.insert(rel);
        }
        let mut removed: Vec<PathBuf> = Vec::new();
        let mut removed_set: HashSet<PathBuf> = HashSet::new();
        for k in gone {
            now.del.push(k.clone());
            let p = PathBuf::from(k);
            let covered = p
                .ancestors()
                .skip(1)
                .any(|a| hiding.contains(a) || removed_set.contains(a));
            if !covered {
                removed_set.insert(p.clone());
                removed.push(p);
            }
        }

        // The layer's tree: the changed entries, the directories leading to them (with the
        // upper's metadata, which is the merged view's), and whiteouts for removed paths.
        let mut tree = Tree::default();
        // False when the entry (or a directory leading to it) vanished since the scan: it is
        // left out, and so is its mark, so the next commit sees it as it is then.
        let mut add_with_parents = |tree: &mut Tree, rel: &Path| -> Result<bool> {
            let mut chain = Vec::new();
            for a in rel.ancestors() {
                if tree.entries.contains_key(a) {
                    break;
                }
                if marks.contains_key(a) {
                    let Some(mut e) = entry_of(a)? else {
                        return Ok(false);
                    };
                    strip_overlay_xattrs(&mut e.meta);
                    chain.push(e);
                }
            }
            for e in chain {
                tree.entries.insert(e.rel.clone(), e);
            }
            Ok(true)
        };
        add_with_parents(&mut tree, Path::new(""))?;
        let mut vanished = Vec::new();
        for rel in &changed {
            if !add_with_parents(&mut tree, rel)? {
                vanished.push(rel);
                continue;
            }
            // The entry itself is taken as is (its parents were added without opaque marks).
            if new_opaque.contains(rel) {
                if let Some(e) = tree.entries.get_mut(rel) {
                    e.meta.xattrs.insert(opaque.into(), b"y".to_vec());
                }
            }
        }
        for rel in vanished {
            if let Some(k) = rel.to_str() {
                now.set.remove(k);
            }
        }
        let template = dirs.work.join("whiteout");
        for rel in &removed {
            if let Some(parent) = rel.parent() {
                if !add_with_parents(&mut tree, parent)? {
                    // Its directory went too: the next commit records both.
                    if let Some(k) = rel.to_str() {
                        now.del.retain(|d| d != k);
                    }
                    continue;
                }
            }
            ensure_whiteout_template(&template)?;
            let meta = read_meta(&template)?;
            tree.entries.insert(
                rel.clone(),
                Entry {
                    rel: rel.clone(),
                    src: template.clone(),
                    meta,
                },
            );
        }
        timer.lap("plan");
        Ok(PlannedCapture {
            now,
            tree,
            upper: upper_dir,
        })
    }
}

/// See [`LayersBackend::plan_capture`].
pub(in crate::backend) struct PlannedCapture {
    pub(in crate::backend) now: marks::Changes,
    pub(in crate::backend) tree: Tree,
    /// The upper directory every data entry's `src` is below (box-controlled: copies
    /// open sources beneath it, never through a symlink).
    pub(in crate::backend) upper: PathBuf,
}
impl LayersBackend {
    /// Paths of the upper directory changed since the last commit's marks: all of them,
    /// or with a `hint` made against the current marks, those among the hinted ones.
    pub(in crate::backend) fn changed_in_upper(
        dirs: &WorkDirs,
        hint: Option<&ChangeHint>,
    ) -> Result<Vec<(PathBuf, bool)>> {
        let mut timer = agentbox_core::timing::Timer::start("change check");
        let memo = ScanMemo::make(dirs, hint)?;
        timer.lap(match memo.scan {
            Scan::Full(_) => "load marks and scan the whole layer",
            Scan::Partial { .. } => "load marks and look at the hinted paths",
        });
        let prev = &memo.prev.captured.marks;
        let mut out = Vec::new();
        let (now, gone): (&BTreeMap<PathBuf, Mark>, Vec<(&String, &Mark)>) = match &memo.scan {
            Scan::Full(now) => (now, marks::not_found(prev, now)),
            Scan::Partial { present, gone } => (
                present,
                gone.iter().filter_map(|k| prev.get_key_value(k)).collect(),
            ),
        };
        for (rel, mark) in now {
            let Some(key) = rel.to_str().filter(|k| !k.is_empty()) else {
                continue;
            };
            if !prev.get(key).is_some_and(|b| b.same(mark)) {
                out.push((rel.clone(), mark.dir));
            }
        }
        for (key, mark) in gone {
            out.push((PathBuf::from(key), mark.dir));
        }
        // Only when a commit may follow: an idle check must not leave a scan of every
        // entry behind in a long-lived process.
        if !out.is_empty() {
            memo.keep();
        }
        Ok(out)
    }

    /// The version of the marks a change check would compare with now.
    pub(in crate::backend) fn marks_version(dirs: &WorkDirs) -> Result<MarksVersion> {
        Ok(marks::load(dirs)?.version())
    }
}

/// Below this many entries the metadata is read on one thread.
const PARALLEL_META_MIN: usize = 256;

/// The entries `rels` of `upper`, read beneath it (never through a symlink the box made)
/// on one thread per core. An entry that cannot be read is left out: the caller reads it
/// again when it needs it, and then reports what went wrong (or that it vanished).
fn read_metas_beneath(upper: &Path, rels: &[&Path]) -> HashMap<PathBuf, Entry> {
    let read = |rel: &Path| -> Option<(PathBuf, Entry)> {
        let meta = crate::fsops::read_meta_beneath(upper, rel).ok()?;
        Some((
            rel.to_owned(),
            Entry {
                rel: rel.to_owned(),
                meta,
                src: upper.join(rel),
            },
        ))
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if workers == 1 || rels.len() < PARALLEL_META_MIN {
        return rels.iter().filter_map(|r| read(r)).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || {
                    rels.iter()
                        .skip(w)
                        .step_by(workers)
                        .filter_map(|r| read(r))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}
