//! Boxes: records, the per-box supervisor, auto-capture and resource limits.

pub mod cgroup;
