//! `spec.deploymentStrategy`: how each versioned Deployment replaces its pods (an `apps/v1`
//! `DeploymentStrategy`), as TWC's field of the same name. It is not the rollout strategy
//! (`spec.rollout`, which moves workflows between versions) and it never enters the build ID.

use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// `apps/v1`'s defaults for a rolling update, which TWC fills too.
pub const DEFAULT_MAX_UNAVAILABLE: &str = "25%";
/// `apps/v1`'s defaults for a rolling update, which TWC fills too.
pub const DEFAULT_MAX_SURGE: &str = "25%";

pub const ROLLING_UPDATE: &str = "RollingUpdate";
pub const RECREATE: &str = "Recreate";

/// The CRD's rules on a strategy (`spec.deploymentStrategy` and `spec.deployment.strategy`
/// carry the same ones, each message naming its own field); [`problems`] says the same.
pub const RULE_TYPE: &str =
    "!has(self.type) || self.type == 'RollingUpdate' || self.type == 'Recreate'";
/// See [`RULE_TYPE`].
pub const RULE_RECREATE: &str =
    "!has(self.rollingUpdate) || !has(self.type) || self.type != 'Recreate'";
/// See [`RULE_TYPE`].
pub const RULE_NOT_BOTH_ZERO: &str = "!has(self.rollingUpdate) || !has(self.rollingUpdate.maxUnavailable) || !has(self.rollingUpdate.maxSurge) || !(string(self.rollingUpdate.maxUnavailable) in ['0', '0%'] && string(self.rollingUpdate.maxSurge) in ['0', '0%'])";
/// See [`RULE_TYPE`].
pub const RULE_AMOUNTS: &str = "!has(self.rollingUpdate) || ((!has(self.rollingUpdate.maxUnavailable) || (type(self.rollingUpdate.maxUnavailable) == string ? self.rollingUpdate.maxUnavailable.matches('^[0-9]+%$') : self.rollingUpdate.maxUnavailable >= 0)) && (!has(self.rollingUpdate.maxSurge) || (type(self.rollingUpdate.maxSurge) == string ? self.rollingUpdate.maxSurge.matches('^[0-9]+%$') : self.rollingUpdate.maxSurge >= 0)))";

/// The strategy with the defaults `apps/v1` (and TWC) fill: type `RollingUpdate`, and for a
/// rolling update `maxUnavailable` and `maxSurge` 25 %. A `Recreate` gets nothing added.
pub fn defaulted(s: &DeploymentStrategy) -> DeploymentStrategy {
    let mut out = s.clone();
    let kind = out.type_.get_or_insert_with(|| ROLLING_UPDATE.into());
    if kind == ROLLING_UPDATE {
        let r = out
            .rolling_update
            .get_or_insert_with(RollingUpdateDeployment::default);
        r.max_unavailable
            .get_or_insert_with(|| IntOrString::String(DEFAULT_MAX_UNAVAILABLE.into()));
        r.max_surge
            .get_or_insert_with(|| IntOrString::String(DEFAULT_MAX_SURGE.into()));
    }
    out
}

/// Whether a `maxUnavailable`/`maxSurge` value is zero (`0`, `"0"` or `"0%"`).
fn is_zero(v: &IntOrString) -> bool {
    match v {
        IntOrString::Int(i) => *i == 0,
        IntOrString::String(s) => matches!(s.as_str(), "0" | "0%"),
    }
}

/// A number (at least 0) or a percentage such as `25%` (a string is a percentage, as in
/// `apps/v1`).
fn is_amount(v: &IntOrString) -> bool {
    match v {
        IntOrString::Int(i) => *i >= 0,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())),
    }
}

/// What is wrong with a strategy, as (field under `spec.deploymentStrategy`, message): the
/// same refusals as TWC's webhook, which the CRD's rules also make.
pub fn problems(s: &DeploymentStrategy) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let kind = s.type_.as_deref().unwrap_or(ROLLING_UPDATE);
    if kind != ROLLING_UPDATE && kind != RECREATE {
        out.push((
            "type",
            format!(
                "unsupported value {kind:?}: supported values are \"RollingUpdate\", \"Recreate\""
            ),
        ));
    }
    let Some(r) = &s.rolling_update else {
        return out;
    };
    if kind == RECREATE {
        out.push((
            "rollingUpdate",
            "may not be set when type is Recreate".into(),
        ));
    }
    for (field, v) in [
        ("rollingUpdate.maxUnavailable", &r.max_unavailable),
        ("rollingUpdate.maxSurge", &r.max_surge),
    ] {
        if let Some(v) = v
            && !is_amount(v)
        {
            out.push((
                field,
                "must be a number of pods (0 or more) or a percentage such as 25%".into(),
            ));
        }
    }
    if let (Some(u), Some(s)) = (&r.max_unavailable, &r.max_surge)
        && is_zero(u)
        && is_zero(s)
    {
        out.push((
            "rollingUpdate",
            "maxUnavailable and maxSurge cannot both be 0".into(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rolling(u: Option<IntOrString>, s: Option<IntOrString>) -> DeploymentStrategy {
        DeploymentStrategy {
            type_: Some(ROLLING_UPDATE.into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_unavailable: u,
                max_surge: s,
            }),
        }
    }

    #[test]
    fn defaults_are_those_of_apps_v1() {
        let filled = defaulted(&DeploymentStrategy::default());
        assert_eq!(
            filled,
            rolling(
                Some(IntOrString::String("25%".into())),
                Some(IntOrString::String("25%".into()))
            )
        );
        // What is set stays; only the missing half is filled.
        let half = defaulted(&DeploymentStrategy {
            type_: None,
            rolling_update: Some(RollingUpdateDeployment {
                max_unavailable: Some(IntOrString::Int(1)),
                max_surge: None,
            }),
        });
        assert_eq!(
            half,
            rolling(
                Some(IntOrString::Int(1)),
                Some(IntOrString::String("25%".into()))
            )
        );
        let recreate = DeploymentStrategy {
            type_: Some(RECREATE.into()),
            rolling_update: None,
        };
        assert_eq!(defaulted(&recreate), recreate);
    }

    #[test]
    fn refuses_what_twc_refuses() {
        let fields = |s: &DeploymentStrategy| -> Vec<&str> {
            problems(s).into_iter().map(|(f, _)| f).collect()
        };
        let unknown = DeploymentStrategy {
            type_: Some("BlueGreen".into()),
            rolling_update: None,
        };
        assert_eq!(fields(&unknown), ["type"]);
        let recreate = DeploymentStrategy {
            type_: Some(RECREATE.into()),
            rolling_update: Some(RollingUpdateDeployment::default()),
        };
        assert_eq!(fields(&recreate), ["rollingUpdate"]);
        for (u, s) in [
            (IntOrString::Int(0), IntOrString::String("0%".into())),
            (IntOrString::String("0%".into()), IntOrString::Int(0)),
        ] {
            let both = rolling(Some(u), Some(s));
            assert_eq!(
                problems(&both)[0].1,
                "maxUnavailable and maxSurge cannot both be 0"
            );
        }
        // One of them 0 is fine, and an unset one is not 0 (it defaults to 25 %).
        assert!(
            problems(&rolling(
                Some(IntOrString::Int(0)),
                Some(IntOrString::Int(1))
            ))
            .is_empty()
        );
        assert!(problems(&rolling(Some(IntOrString::Int(0)), None)).is_empty());
        let odd = rolling(
            Some(IntOrString::String("a lot".into())),
            Some(IntOrString::Int(-1)),
        );
        assert_eq!(
            fields(&odd),
            ["rollingUpdate.maxUnavailable", "rollingUpdate.maxSurge"]
        );
    }
}
