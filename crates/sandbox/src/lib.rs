//! Running processes in a box on Linux: namespaces, the box's root filesystem, PID 1, PTYs.
//!
//! The supervisor (crate `boxes`) calls [`launch::launch`]; the binary's hidden
//! `__box-init` command calls [`init::launcher_main`]. They talk over [`ipc`] with the
//! messages of [`proto`].

mod caps;
pub mod cgroup;
pub mod idmap;
pub mod init;
pub mod ipc;
pub mod launch;
pub mod net;
pub mod proto;
pub mod seccomp;
pub mod startup;
pub mod userns;
