//! Whether unprivileged user namespaces are available, and if not, why.

/// A sentence (starting with "; ") naming the setting that blocks unprivileged user
/// namespaces on this machine and how to change it; empty when none is found.
pub fn blocked_reason() -> String {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "; unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0): enable them with `sudo sysctl -w kernel.unprivileged_userns_clone=1`, or run as root".into();
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return "; user namespaces are disabled (user.max_user_namespaces = 0): raise it with `sudo sysctl -w user.max_user_namespaces=15000`, or run as root".into();
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return "; AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1): allow them with `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for agentbox, or run as root".into();
    }
    String::new()
}
