//! Box cgroups on cgroup v1: one group per controller hierarchy.

use super::*;

/// The distinct v1 mounts with the controllers of interest bound to each.
pub(super) fn v1_groups(mounts: &[(Controller, PathBuf)]) -> Vec<(PathBuf, Vec<Controller>)> {
    let mut out: Vec<(PathBuf, Vec<Controller>)> = Vec::new();
    for (c, path) in mounts {
        match out.iter_mut().find(|(p, _)| p == path) {
            Some((_, cs)) => cs.push(*c),
            None => out.push((path.clone(), vec![*c])),
        }
    }
    out
}

pub(super) fn create_v1(
    name: &str,
    limits: &Limits,
    layout: &Layout,
    mounts: &[(Controller, PathBuf)],
    parent: &Path,
) -> Result<BoxCgroup, CgroupError> {
    for c in requested(limits) {
        if layout.mount_of(c).is_none() {
            return Err(CgroupError::ControllerMissing {
                controller: c.name(),
                needed_for: c.needed_for(),
                path: layout.any_mount(),
                hint: format!(
                    "mount its hierarchy, e.g. `mkdir -p /sys/fs/cgroup/{0} && mount -t cgroup -o {0} cgroup /sys/fs/cgroup/{0}`",
                    c.name()
                ),
            });
        }
    }
    // pids and freezer are always used: they make every process of the box listable and
    // killable even when no limit is set.
    let mut wanted = vec![Controller::Pids, Controller::Freezer];
    wanted.extend(requested(limits));

    let mut groups = Vec::new();
    for (mount, controllers) in v1_groups(mounts) {
        let path = box_dir(&mount, parent, name);
        if controllers.iter().any(|c| wanted.contains(c)) || is_dir(&path) {
            let base = under(&mount, parent);
            if !is_dir(&base) {
                return Err(missing_parent(parent, &base));
            }
            groups.push(Group { path, controllers });
        }
    }
    if groups.is_empty() {
        return Err(cannot_create(
            limits,
            &layout.any_mount(),
            "neither the pids nor the freezer cgroup hierarchy is mounted".into(),
        ));
    }

    let old = BoxCgroup {
        name: name.to_owned(),
        version: 1,
        groups: groups.iter().filter(|g| is_dir(&g.path)).cloned().collect(),
    };
    let mut created = Vec::new();
    let result = (|| {
        for g in &groups {
            if let Some(agentbox) = g.path.parent() {
                ensure_dir(agentbox, limits)?;
            }
            if ensure_dir(&g.path, limits)? {
                created.push(g.path.clone());
            }
        }
        for g in &groups {
            apply_v1(g, limits)?;
        }
        move_existing(&old, &groups, &created)
    })();
    finish(name, 1, groups, created, result)
}

/// Move the processes already in the box's older directories into the ones just created, so
/// the invariant "every process is in every directory" holds after adopting.
pub(super) fn move_existing(
    old: &BoxCgroup,
    groups: &[Group],
    created: &[PathBuf],
) -> Result<(), CgroupError> {
    if old.groups.is_empty() || created.is_empty() {
        return Ok(());
    }
    for pid in old.pids()? {
        for g in groups.iter().filter(|g| created.contains(&g.path)) {
            let procs = g.path.join("cgroup.procs");
            if let Err(e) = write_raw(&procs, &pid.to_string()) {
                // A process that exited meanwhile needs no moving.
                if process_exists(pid) {
                    return Err(CgroupError::io(
                        format!(
                            "moving process {pid} into a new hierarchy of box {}",
                            old.name
                        ),
                        &procs,
                        e,
                    ));
                }
            }
        }
    }
    Ok(())
}

pub(super) fn apply_v1(g: &Group, limits: &Limits) -> Result<(), CgroupError> {
    let dir = &g.path;
    if g.has(Controller::Memory) {
        let limit_file = dir.join("memory.limit_in_bytes");
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        let value = limits
            .memory_bytes
            .map_or_else(|| "-1".to_owned(), |b| b.to_string());
        let hint = "the box may already use more memory than the new limit";
        // RAM+swap must stay >= RAM, so lift it first, set RAM, then bound RAM+swap to the same
        // value: the box cannot escape its limit by swapping. The file exists only when the
        // kernel accounts swap.
        let has_memsw = memsw.exists();
        if has_memsw {
            write_file(&memsw, "-1", "lifting the box's memory+swap limit", "")?;
        }
        write_file(&limit_file, &value, "setting the box's memory limit", hint)?;
        if has_memsw {
            write_file(&memsw, &value, "setting the box's memory+swap limit", hint)?;
        }
    }
    if g.has(Controller::Pids) {
        let value = limits
            .pids
            .map_or_else(|| "max".to_owned(), |n| n.to_string());
        write_file(
            &dir.join("pids.max"),
            &value,
            "setting the box's process limit",
            "",
        )?;
    }
    if g.has(Controller::Cpu) {
        let quota = match limits.cpus {
            Some(c) => cpu_quota_us(c)?.to_string(),
            None => "-1".to_owned(),
        };
        let quota_file = dir.join("cpu.cfs_quota_us");
        if limits.cpus.is_some() && !quota_file.exists() {
            return Err(CgroupError::ControllerMissing {
                controller: "cpu",
                needed_for: "cpu limits",
                path: quota_file,
                hint: "the kernel lacks CFS bandwidth control (CONFIG_CFS_BANDWIDTH)".into(),
            });
        }
        if quota_file.exists() {
            write_file(
                &dir.join("cpu.cfs_period_us"),
                &CPU_PERIOD_US.to_string(),
                "setting the box's cpu period",
                "",
            )?;
            write_file(
                &quota_file,
                &quota,
                "setting the box's cpu quota",
                "a parent cgroup may have a smaller quota",
            )?;
        }
    }
    Ok(())
}
