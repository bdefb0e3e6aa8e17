//! Who may use a ClusterConnection, and for which Temporal namespaces: the policy a platform
//! team sets when it hands one connection out to many tenant namespaces. Shaped like Gateway
//! API's `allowedRoutes.namespaces` (a cluster-wide object that namespaced objects attach to).
//! Types and the pure rule; no IO.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The policy part of a ClusterConnection's spec (a namespaced Connection has none: only
/// WorkerDeployments of its own namespace can reference it).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sharing {
    /// Which namespaces' WorkerDeployments may use this ClusterConnection. Unset: every
    /// namespace (`from: All`). A WorkerDeployment in a namespace it does not allow is refused
    /// with reason `ConnectionNotAllowed` before any of its Secrets is read or Temporal is
    /// called; its running versions are left as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,

    /// The Temporal namespaces WorkerDeployments may target through this ClusterConnection
    /// (their `spec.workerOptions.temporalNamespace`). Exact names; an entry ending in `*`
    /// allows every name starting with what comes before it (`team-a-*`), and `*` alone allows
    /// any. Unset or empty: any Temporal namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub allowed_temporal_namespaces: Vec<String>,
}

/// Which namespaces may use a ClusterConnection.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(
    validation = Rule::new("self.from != 'Selector' || has(self.selector)")
        .message("selector is required when from is Selector"),
    validation = Rule::new("self.from == 'Selector' || !has(self.selector)")
        .message("selector may only be set when from is Selector"),
    // What the apiserver demands of a label selector in built-in kinds (an embedded
    // LabelSelector is not checked in a CRD): with values `In: []` matches nothing and
    // `NotIn: []` everything, which is never what was meant.
    validation = Rule::new(
        "!has(self.selector) || !has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e, e.operator in ['In', 'NotIn'] ? has(e.values) && size(e.values) > 0 : e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0))"
    )
    .message(
        "selector.matchExpressions: In and NotIn need at least one value, Exists and DoesNotExist take none (no other operator)"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AllowedNamespaces {
    /// `All` (the default): WorkerDeployments in every namespace. `Selector`: only those in
    /// namespaces whose labels match `selector`.
    #[serde(default)]
    pub from: FromNamespaces,

    /// The labels a namespace must have (with `from: Selector`), as in any Kubernetes label
    /// selector (`matchLabels`, `matchExpressions`). An empty selector matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Where WorkerDeployments using a ClusterConnection may live.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FromNamespaces {
    /// Every namespace.
    #[default]
    All,
    /// The namespaces whose labels match the selector.
    Selector,
}

/// How a policy judged one WorkerDeployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Refused by a rule, said for people: which rule, and what it wanted.
    Refused(String),
    /// Cannot be judged yet (the namespace's labels are not known): neither allowed nor
    /// refused; ask again.
    Unknown(String),
}

impl Sharing {
    /// Judges a WorkerDeployment in `namespace` targeting `temporal_namespace`, with the
    /// namespace's `labels` (None: not known, only needed by a selector).
    pub fn judge(
        &self,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
        temporal_namespace: &str,
    ) -> Verdict {
        if let Some(allowed) = &self.allowed_namespaces
            && allowed.from == FromNamespaces::Selector
        {
            let Some(labels) = labels else {
                return Verdict::Unknown(format!(
                    "the labels of namespace {namespace} are not known yet (spec.allowedNamespaces uses a selector)"
                ));
            };
            let selector = allowed.selector.clone().unwrap_or_default();
            match selector_matches(&selector, labels) {
                Ok(true) => {}
                Ok(false) => {
                    return Verdict::Refused(format!(
                        "namespace {namespace} does not match spec.allowedNamespaces.selector ({})",
                        describe_selector(&selector)
                    ));
                }
                Err(why) => {
                    return Verdict::Refused(format!(
                        "spec.allowedNamespaces.selector is invalid ({why}), so no namespace is allowed"
                    ));
                }
            }
        }
        if !self.allows_temporal_namespace(temporal_namespace) {
            return Verdict::Refused(format!(
                "Temporal namespace {temporal_namespace:?} is not in spec.allowedTemporalNamespaces [{}]",
                self.allowed_temporal_namespaces.join(", ")
            ));
        }
        Verdict::Allowed
    }

    /// Whether `name` is one of the allowed Temporal namespaces (all are when none is listed).
    pub fn allows_temporal_namespace(&self, name: &str) -> bool {
        self.allowed_temporal_namespaces.is_empty()
            || self
                .allowed_temporal_namespaces
                .iter()
                .any(|p| match p.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix),
                    None => p == name,
                })
    }

    /// Whether the policy looks at namespace labels at all.
    pub fn uses_labels(&self) -> bool {
        self.allowed_namespaces
            .as_ref()
            .is_some_and(|a| a.from == FromNamespaces::Selector)
    }
}

/// Whether `labels` match `selector`, with Kubernetes' semantics (every `matchLabels` pair and
/// every expression must hold; `NotIn` and `DoesNotExist` hold for a missing key). An unknown
/// operator, or `In`/`NotIn` without values, is an error (the apiserver would refuse it).
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let pairs = selector.match_labels.iter().flatten();
    let mut ok = pairs.into_iter().all(|(k, v)| labels.get(k) == Some(v));
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        let holds = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "operator {} on key {:?} needs values",
                    e.operator, e.key
                ));
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => return Err(format!("unknown operator {other:?} on key {:?}", e.key)),
        };
        ok &= holds;
    }
    Ok(ok)
}

/// A selector the way `kubectl` prints one: `team=a,env in (dev,test),!legacy`.
pub fn describe_selector(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    if parts.is_empty() {
        "everything".into()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn by_selector(selector: LabelSelector) -> Sharing {
        Sharing {
            allowed_namespaces: Some(AllowedNamespaces {
                from: FromNamespaces::Selector,
                selector: Some(selector),
            }),
            ..Default::default()
        }
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn the_default_allows_everyone_everywhere() {
        let open = Sharing::default();
        assert_eq!(open.judge("a", None, "prod"), Verdict::Allowed);
        assert!(!open.uses_labels());
    }

    #[test]
    fn a_selector_allows_the_labelled_namespaces_only() {
        let s = by_selector(LabelSelector {
            match_labels: Some([("team".to_string(), "a".to_string())].into()),
            ..Default::default()
        });
        assert_eq!(
            s.judge("t1", Some(&labels(&[("team", "a")])), "x"),
            Verdict::Allowed
        );
        let Verdict::Refused(why) = s.judge("t2", Some(&labels(&[("team", "b")])), "x") else {
            panic!("not refused");
        };
        assert_eq!(
            why,
            "namespace t2 does not match spec.allowedNamespaces.selector (team=a)"
        );
        assert!(matches!(s.judge("t3", None, "x"), Verdict::Unknown(_)));
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let s = by_selector(LabelSelector {
            match_expressions: Some(vec![
                expr("env", "In", &["dev", "test"]),
                expr("frozen", "DoesNotExist", &[]),
                expr("tier", "NotIn", &["prod"]),
            ]),
            ..Default::default()
        });
        let judge = |l: &[(&str, &str)]| s.judge("n", Some(&labels(l)), "x") == Verdict::Allowed;
        assert!(judge(&[("env", "dev")]));
        assert!(judge(&[("env", "test"), ("tier", "web")]));
        assert!(!judge(&[("env", "prod")]));
        assert!(!judge(&[("env", "dev"), ("frozen", "yes")]));
        assert!(!judge(&[("env", "dev"), ("tier", "prod")]));
        assert!(!judge(&[]));
        let bad = by_selector(LabelSelector {
            match_expressions: Some(vec![expr("env", "Like", &["d"])]),
            ..Default::default()
        });
        assert!(matches!(
            bad.judge("n", Some(&labels(&[("env", "d")])), "x"),
            Verdict::Refused(why) if why.contains("invalid")
        ));
    }

    #[test]
    fn temporal_namespaces_by_name_or_prefix() {
        let s = Sharing {
            allowed_temporal_namespaces: vec!["payments".into(), "team-a-*".into()],
            ..Default::default()
        };
        assert!(s.allows_temporal_namespace("payments"));
        assert!(s.allows_temporal_namespace("team-a-dev"));
        assert!(!s.allows_temporal_namespace("payments-prod"));
        assert!(!s.allows_temporal_namespace("team-b-dev"));
        let Verdict::Refused(why) = s.judge("n", None, "orders") else {
            panic!("not refused");
        };
        assert_eq!(
            why,
            "Temporal namespace \"orders\" is not in spec.allowedTemporalNamespaces [payments, team-a-*]"
        );
        let any = Sharing {
            allowed_temporal_namespaces: vec!["*".into()],
            ..Default::default()
        };
        assert!(any.allows_temporal_namespace("anything"));
    }
}
