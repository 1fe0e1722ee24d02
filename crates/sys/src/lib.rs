//! Audited wrappers over the Linux ioctls agentbox needs and the safe crates do not cover.
