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
