//! Box cgroups on the unified (v2) hierarchy.

use super::*;

/// The controllers listed in a v2 `cgroup.controllers` or `cgroup.subtree_control` file.
pub(super) fn v2_controller_list(path: &Path) -> Result<Vec<String>, CgroupError> {
    Ok(read_file(path)?
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

pub(super) fn create_v2(
    name: &str,
    limits: &Limits,
    mount: &Path,
    parent: &Path,
) -> Result<BoxCgroup, CgroupError> {
    let base = under(mount, parent);
    if !is_dir(&base) {
        return Err(missing_parent(parent, &base));
    }
    let requested = requested(limits);
    let available = v2_controller_list(&base.join("cgroup.controllers"))?;
    for c in &requested {
        if !available.iter().any(|a| a == c.name()) {
            return Err(CgroupError::ControllerMissing {
                controller: c.name(),
                needed_for: c.needed_for(),
                path: base.clone(),
                hint: "it must be enabled in cgroup.subtree_control of every ancestor (with systemd: Delegate=yes on the unit owning this cgroup)".into(),
            });
        }
    }
    let agentbox = base.join(GROUP_DIR);
    ensure_dir(&agentbox, limits)?;

    // Enable the controllers from the root down to agentbox/, skipping the levels that already
    // have them: those above a delegated parent are not ours to write. An unavailable
    // controller only matters when its limit was asked for.
    let mut chain = vec![mount.to_owned()];
    let mut level = mount.to_owned();
    for comp in parent.components() {
        level.push(comp);
        chain.push(level.clone());
    }
    chain.push(agentbox.clone());
    for dir in &chain {
        let control = dir.join("cgroup.subtree_control");
        let enabled = v2_controller_list(&control)?;
        let offered = v2_controller_list(&dir.join("cgroup.controllers"))?;
        for c in [Controller::Memory, Controller::Pids, Controller::Cpu] {
            if enabled.iter().any(|e| e == c.name()) {
                continue;
            }
            let err = if offered.iter().any(|o| o == c.name()) {
                match write_raw(&control, &format!("+{}", c.name())) {
                    Ok(()) => continue,
                    Err(e) => e.to_string(),
                }
            } else {
                "not offered by the parent cgroup".to_owned()
            };
            if requested.contains(&c) {
                return Err(CgroupError::ControllerMissing {
                    controller: c.name(),
                    needed_for: c.needed_for(),
                    path: control,
                    hint: format!(
                        "enabling it failed: {err}; a cgroup with processes of its own cannot \
                         enable controllers for its children (move them to a leaf cgroup), and \
                         a non-root user needs the cgroup delegated"
                    ),
                });
            }
        }
    }

    let dir = agentbox.join(name);
    let mut created = Vec::new();
    let result = (|| {
        if ensure_dir(&dir, limits)? {
            created.push(dir.clone());
        }
        apply_v2(&dir, limits)
    })();
    let group = Group {
        path: dir,
        controllers: Controller::ALL.to_vec(),
    };
    finish(name, 2, vec![group], created, result)
}

pub(super) fn apply_v2(dir: &Path, limits: &Limits) -> Result<(), CgroupError> {
    let set = |file: &str, value: String, what: &str, needed: Option<Controller>, hint: &str| {
        let path = dir.join(file);
        if !path.exists() {
            return match needed {
                Some(c) => Err(CgroupError::ControllerMissing {
                    controller: c.name(),
                    needed_for: c.needed_for(),
                    path,
                    hint: "the controller is not enabled for this cgroup".into(),
                }),
                None => Ok(()),
            };
        }
        write_file(&path, &value, what, hint)
    };
    let mem = limits.memory_bytes;
    set(
        "memory.max",
        mem.map_or_else(|| "max".to_owned(), |b| b.to_string()),
        "setting the box's memory limit",
        mem.map(|_| Controller::Memory),
        "the box may already use more memory than the new limit",
    )?;
    // The limit covers RAM and swap together, as on v1: with a limit, the box does not swap.
    set(
        "memory.swap.max",
        if mem.is_some() { "0" } else { "max" }.to_owned(),
        "setting the box's swap limit",
        None,
        "",
    )?;
    set(
        "pids.max",
        limits
            .pids
            .map_or_else(|| "max".to_owned(), |n| n.to_string()),
        "setting the box's process limit",
        limits.pids.map(|_| Controller::Pids),
        "",
    )?;
    let quota = match limits.cpus {
        Some(c) => cpu_quota_us(c)?.to_string(),
        None => "max".to_owned(),
    };
    set(
        "cpu.max",
        format!("{quota} {CPU_PERIOD_US}"),
        "setting the box's cpu quota",
        limits.cpus.map(|_| Controller::Cpu),
        "",
    )
}
