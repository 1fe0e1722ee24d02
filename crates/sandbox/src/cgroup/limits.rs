//! The limits a box's cgroup enforces (memory with swap, processes, CPU), as given and as
//! the kernel files take them.

use super::*;

/// Resource limits of a box. `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Memory (RAM and swap together) in bytes; exceeding it OOM-kills a process of the box.
    pub memory_bytes: Option<u64>,
    /// Maximum number of processes and threads; a fork beyond it fails with EAGAIN.
    pub pids: Option<u64>,
    /// CPU time as a number of cores, e.g. `1.5`; enforced per 100 ms period.
    pub cpus: Option<f64>,
}

impl Limits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.pids.is_none() && self.cpus.is_none()
    }

    /// Parse a memory size: a number of bytes, or a number (fractions allowed) followed by a
    /// binary unit `K`, `M`, `G` or `T` (case-insensitive, optionally followed by `B` or
    /// `iB`): `"1048576"`, `"512M"`, `"1.5G"`, `"2GiB"`. The result is rounded down to whole
    /// bytes and must be positive.
    pub fn parse_memory(s: &str) -> Result<u64, CgroupError> {
        let invalid = |reason: &str| CgroupError::InvalidLimit {
            what: "memory size",
            value: s.to_owned(),
            reason: reason.to_owned(),
        };
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let shift =
            match unit.trim_start().to_ascii_lowercase().as_str() {
                "" | "b" => 0,
                "k" | "kb" | "kib" => 10,
                "m" | "mb" | "mib" => 20,
                "g" | "gb" | "gib" => 30,
                "t" | "tb" | "tib" => 40,
                _ => return Err(invalid(
                    "expected a number of bytes, or a number with K, M, G or T (e.g. 512M, 1.5G)",
                )),
            };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number (e.g. 512M, 1.5G)"));
        }
        if fraction.contains('.') {
            return Err(invalid("more than one decimal point"));
        }
        if shift == 0 && !fraction.is_empty() {
            return Err(invalid("a number of bytes must be whole"));
        }
        let too_big = || invalid("too large");
        let multiplier = 1u128 << shift;
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_big())?
        };
        // Exact arithmetic: the fraction is digits / 10^len of the unit; at most 18 digits keep
        // 10^len and the products well inside u128.
        let fraction = &fraction[..fraction.len().min(18)];
        let frac_bytes = if fraction.is_empty() {
            0
        } else {
            let digits: u128 = fraction.parse().map_err(|_| invalid("bad fraction"))?;
            digits * multiplier / 10u128.pow(fraction.len() as u32)
        };
        let bytes = whole
            .checked_mul(multiplier)
            .and_then(|b| b.checked_add(frac_bytes))
            .ok_or_else(too_big)?;
        let bytes = u64::try_from(bytes).map_err(|_| too_big())?;
        if bytes == 0 {
            return Err(invalid("a memory limit must be more than 0 bytes"));
        }
        Ok(bytes)
    }

    /// Check that every set limit can be applied: memory and pids at least 1, cpus a finite
    /// number of at least 0.01 (the kernel's smallest quota is 1 ms per 100 ms period).
    pub fn validate(&self) -> Result<(), CgroupError> {
        if self.memory_bytes == Some(0) {
            return Err(CgroupError::InvalidLimit {
                what: "memory limit",
                value: "0".into(),
                reason: "must be more than 0 bytes".into(),
            });
        }
        if self.pids == Some(0) {
            return Err(CgroupError::InvalidLimit {
                what: "pids limit",
                value: "0".into(),
                reason: "must be at least 1 (the box's first process counts)".into(),
            });
        }
        if let Some(cpus) = self.cpus {
            cpu_quota_us(cpus)?;
        }
        Ok(())
    }

    /// A short human description, e.g. `memory 32 MiB, pids 10, cpus 1.5`.
    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.memory_bytes {
            parts.push(format!("memory {}", human_bytes(m)));
        }
        if let Some(p) = self.pids {
            parts.push(format!("pids {p}"));
        }
        if let Some(c) = self.cpus {
            parts.push(format!("cpus {c}"));
        }
        parts.join(", ")
    }
}

pub(super) fn human_bytes(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{} {unit}", b >> shift);
        }
    }
    format!("{b} bytes")
}

/// The CFS quota for `cpus` cores at the fixed period.
pub(super) fn cpu_quota_us(cpus: f64) -> Result<u64, CgroupError> {
    let invalid = |reason: &str| CgroupError::InvalidLimit {
        what: "cpu limit",
        value: cpus.to_string(),
        reason: reason.to_owned(),
    };
    if !cpus.is_finite() || cpus <= 0.0 {
        return Err(invalid("must be a positive number of cores, e.g. 1.5"));
    }
    let quota = (cpus * CPU_PERIOD_US as f64).round();
    if quota < CPU_MIN_QUOTA_US as f64 {
        return Err(invalid(
            "must be at least 0.01 cores (the kernel's smallest quota)",
        ));
    }
    if quota >= u64::MAX as f64 {
        return Err(invalid("too large"));
    }
    Ok(quota as u64)
}
