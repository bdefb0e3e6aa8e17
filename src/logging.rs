//! Logging of `twc run`: the `--log-level` filter, checked when the command line is parsed,
//! and the subscriber (colour only on a terminal).

use std::io::IsTerminal;

use clap::ValueEnum;

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event (coloured only when stdout is a terminal).
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

fn is_level(s: &str) -> bool {
    LEVELS.iter().any(|l| l.eq_ignore_ascii_case(s.trim()))
}

/// Checks a `--log-level` value and returns it without blanks: comma-separated directives, each a level (`info`) or
/// `target=level` (`twc_controller=debug`). A bare word that is not a level is refused:
/// the filter would read it as a target name and log everything of it, or nothing.
pub fn parse_level(value: &str) -> Result<String, String> {
    let directives: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err(format!("empty; use one of {}", LEVELS.join(", ")));
    }
    for d in &directives {
        let level = match d.rsplit_once('=') {
            Some((target, level)) if !target.trim().is_empty() => level,
            Some(_) => return Err(format!("`{d}` names no target (use `target=level`)")),
            None => d,
        };
        if !is_level(level) {
            return Err(format!(
                "`{level}` is not a log level (one of {}); a directive is a level or \
                 `target=level`, e.g. `info,twc_controller=debug`",
                LEVELS.join(", ")
            ));
        }
    }
    let filter = directives.join(",");
    tracing_subscriber::EnvFilter::try_new(&filter).map_err(|e| e.to_string())?;
    Ok(filter)
}

/// Installs the subscriber. `level` was checked by [`parse_level`].
pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(level)?;
    let ansi = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

/// What was built: the crate version, the git commit and the compiler (see `build.rs`).
pub struct BuildInfo {
    pub version: &'static str,
    pub commit: &'static str,
    pub rustc: &'static str,
}

pub const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    commit: env!("TWC_GIT_COMMIT"),
    rustc: env!("TWC_RUSTC_VERSION"),
};

#[cfg(test)]
mod tests {
    use super::parse_level;

    #[test]
    fn levels_and_directives_pass() {
        for (given, filter) in [
            ("info", "info"),
            ("DEBUG", "DEBUG"),
            ("info,twc_controller=debug", "info,twc_controller=debug"),
            ("warn, kube=info ", "warn,kube=info"),
            ("off", "off"),
        ] {
            assert_eq!(parse_level(given).as_deref(), Ok(filter), "{given}");
        }
    }

    #[test]
    fn unknown_levels_are_refused() {
        for bad in ["bogus", "", "info,twc_controller=loud", "=debug", "inf"] {
            assert!(parse_level(bad).is_err(), "{bad:?} passed");
        }
    }
}
