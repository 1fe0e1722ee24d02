//! Checks of values beyond their type (ranges, shapes), as [`super::key::Key::check`]s.

use crate::cgroup::Limits;

use super::key::Value;

fn check_upstream(key: &str, v: &Value) -> Result<(), String> {
    match v {
        Value::Str(url) => {
            agentbox_broker::endpoint::check_upstream(key, url).map_err(|e| match e {
                agentbox_broker::BrokerError::BadUpstream { why, .. } => why,
                other => other.to_string(),
            })
        }
        _ => Ok(()),
    }
}

pub(super) fn check_anthropic_upstream(v: &Value) -> Result<(), String> {
    check_upstream("broker.anthropicUpstream", v)
}

pub(super) fn check_openai_upstream(v: &Value) -> Result<(), String> {
    check_upstream("broker.openaiUpstream", v)
}

pub(super) fn check_detach_key(v: &Value) -> Result<(), String> {
    match v {
        Value::Str(s) => crate::sessions::DetachKey::parse(s).map(|_| ()),
        _ => Ok(()),
    }
}

pub(super) fn check_env(v: &Value) -> Result<(), String> {
    if let Value::List(items) = v {
        for kv in items {
            match kv.split_once('=') {
                Some((k, _)) if !k.is_empty() && !k.contains(char::is_whitespace) => {}
                _ => {
                    return Err(format!(
                        "{kv:?} is not KEY=VALUE (for example NODE_ENV=development)"
                    ))
                }
            }
        }
    }
    Ok(())
}

pub(super) fn check_host_paths(v: &Value) -> Result<(), String> {
    if let Value::List(items) = v {
        for entry in items {
            crate::hostview::parse(entry)?;
        }
    }
    Ok(())
}

pub(super) fn check_home_tools(v: &Value) -> Result<(), String> {
    if let Value::List(items) = v {
        for entry in items {
            crate::hostview::parse_home_tool(entry)?;
        }
    }
    Ok(())
}

fn check_limits(limits: Limits) -> Result<(), String> {
    limits.validate().map_err(|e| e.to_string())
}

pub(super) fn check_memory(v: &Value) -> Result<(), String> {
    match v {
        Value::Size { bytes, .. } => check_limits(Limits {
            memory_bytes: Some(*bytes),
            ..Limits::default()
        }),
        _ => Ok(()),
    }
}

pub(super) fn check_pids(v: &Value) -> Result<(), String> {
    match v {
        Value::U64(n) => check_limits(Limits {
            pids: Some(*n),
            ..Limits::default()
        }),
        _ => Ok(()),
    }
}

pub(super) fn check_cpus(v: &Value) -> Result<(), String> {
    match v {
        Value::F64(f) => check_limits(Limits {
            cpus: Some(*f),
            ..Limits::default()
        }),
        _ => Ok(()),
    }
}

pub(super) fn check_provider(v: &Value) -> Result<(), String> {
    match v {
        Value::Str(s) if s == "local" || s == "docker" => Ok(()),
        _ => Err("expected local or docker".into()),
    }
}

/// A member name of a map key: what `--docker-host NAME` can say.
pub(super) fn check_member_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?}: a name is letters, digits, '-' and '_' (at most 64)"
        ))
    }
}

/// An engine URL: `unix://`, `tcp://`, `ssh://`, `http://` or `https://`.
pub(super) fn check_engine_url(url: &str) -> Result<(), String> {
    const SCHEMES: &[&str] = &["unix://", "tcp://", "ssh://", "http://", "https://"];
    if SCHEMES
        .iter()
        .any(|s| url.starts_with(s) && url.len() > s.len())
    {
        Ok(())
    } else {
        Err(format!(
            "{url:?}: an engine is a URL starting with unix://, tcp://, ssh://, http:// or https://"
        ))
    }
}

pub(super) fn check_docker_hosts(v: &Value) -> Result<(), String> {
    if let Value::Map(m) = v {
        for (name, url) in m {
            check_member_name(name)?;
            check_engine_url(url)?;
        }
    }
    Ok(())
}
