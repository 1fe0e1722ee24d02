//! `agentbox tournament`: its arguments.

use std::time::Duration;

use clap::Args;

/// The usage line is written out: clap's own lists, in an error, every argument it found
/// as if required — `--home <HOME>` too, when `AGENTBOX_HOME` is set, and BOX as `<BOX>`.
#[derive(Debug, Args)]
#[command(override_usage = "agentbox tournament [OPTIONS] --test <CMD> -c <NAME=CMD>... [BOX]")]
pub struct TournamentArgs {
    /// The box every candidate is forked from (left out: the current project's only box).
    #[arg(value_name = "BOX")]
    pub name: Option<String>,
    /// The test: a shell command run in each candidate's box after the candidate's own;
    /// exit status 0 passes.
    #[arg(long, value_name = "CMD", required = true, allow_hyphen_values = true)]
    pub test: String,
    /// A candidate: NAME=CMD, a shell command run in a fork of BOX named BOX-NAME (on
    /// branch agentbox/BOX-NAME). Repeatable; the order given breaks ties.
    #[arg(
        short = 'c',
        long = "candidate",
        value_name = "NAME=CMD",
        required = true,
        allow_hyphen_values = true
    )]
    pub candidates: Vec<String>,
    /// Fork at this node of BOX's history instead of its HEAD.
    #[arg(long, value_name = "REF")]
    pub at: Option<String>,
    /// Move BOX to the winner's node and its branches to the winner's tips (BOX's
    /// processes are killed, as by a checkout); the winner's box is removed then. Without
    /// it BOX is left exactly as it was and the winner's box is kept.
    #[arg(long)]
    pub keep: bool,
    /// Keep the losers' boxes (stopped) instead of removing them and their branches.
    #[arg(long)]
    pub keep_losers: bool,
    /// How many candidates run at once (default: all of them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub parallel: Option<u64>,
    /// Stop a candidate whose command and test together run longer than DUR (`90s`, `5m`,
    /// `1h`, `500ms`; a bare number is seconds); it fails. Default: no limit.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The first candidate whose test passes wins; the others are stopped then (default:
    /// the first passing one in the order given, once every candidate has run).
    #[arg(long)]
    pub first: bool,
}

/// A duration as `--timeout` takes it: a number with `ms`, `s`, `m` or `h` (none: seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 5m, 1h, 500ms)"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("{s:?} is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
