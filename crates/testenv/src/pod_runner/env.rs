//! A container's environment: `env`, `envFrom`, `$(VAR)` expansion, `fieldRef`, and values that
//! point into volume mounts rewritten to the pod's directory.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use super::{LocalImage, PodRunner, Waiting};

impl PodRunner {
    pub(super) async fn resolve_env(
        &self,
        pod: &Pod,
        c: &Container,
        local: &LocalImage,
        volumes: &HashMap<String, PathBuf>,
    ) -> Result<Vec<(String, String)>, Waiting> {
        let ns = pod.namespace().unwrap_or_default();
        let mut env: Vec<(String, String)> = local.env.clone();
        let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
            env.retain(|(ek, _)| *ek != k);
            env.push((k, v));
        };
        let missing = |what: String| Waiting {
            reason: "CreateContainerConfigError",
            message: what,
        };
        for from in c.env_from.clone().unwrap_or_default() {
            let prefix = from.prefix.clone().unwrap_or_default();
            if let Some(r) = &from.secret_ref {
                match self.secret(&ns, &r.name).await {
                    Some(s) => {
                        for (k, v) in s.data.unwrap_or_default() {
                            set(&mut env, format!("{prefix}{k}"), bytes_to_string(&v));
                        }
                    }
                    None if r.optional.unwrap_or(false) => {}
                    None => return Err(missing(format!("secret \"{}\" not found", r.name))),
                }
            }
            if let Some(r) = &from.config_map_ref {
                match self.config_map(&ns, &r.name).await {
                    Some(cm) => {
                        for (k, v) in cm.data.unwrap_or_default() {
                            set(&mut env, format!("{prefix}{k}"), v);
                        }
                    }
                    None if r.optional.unwrap_or(false) => {}
                    None => return Err(missing(format!("configmap \"{}\" not found", r.name))),
                }
            }
        }
        for e in c.env.clone().unwrap_or_default() {
            let value = if let Some(v) = &e.value {
                expand(v, &env)
            } else if let Some(from) = &e.value_from {
                if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let value = self
                        .secret(&ns, &r.name)
                        .await
                        .and_then(|s| s.data.unwrap_or_default().get(&r.key).cloned());
                    match value {
                        Some(v) => bytes_to_string(&v),
                        None if optional => continue,
                        None => {
                            return Err(missing(format!(
                                "couldn't find key {} in Secret {ns}/{}",
                                r.key, r.name
                            )));
                        }
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let value = self
                        .config_map(&ns, &r.name)
                        .await
                        .and_then(|cm| cm.data.unwrap_or_default().get(&r.key).cloned());
                    match value {
                        Some(v) => v,
                        None if optional => continue,
                        None => {
                            return Err(missing(format!(
                                "couldn't find key {} in ConfigMap {ns}/{}",
                                r.key, r.name
                            )));
                        }
                    }
                } else if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path)
                } else {
                    continue;
                }
            } else {
                String::new()
            };
            set(&mut env, e.name.clone(), value);
        }
        // Paths inside mounted volumes point into the pod directory instead.
        let mut mounts: Vec<(String, PathBuf)> = c
            .volume_mounts
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                let base = volumes.get(&m.name)?.clone();
                let dir = match m.sub_path.as_deref() {
                    Some(sub) if !sub.is_empty() => base.join(sub),
                    _ => base,
                };
                Some((m.mount_path.trim_end_matches('/').to_string(), dir))
            })
            .collect();
        mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (_, value) in env.iter_mut() {
            for (mount, dir) in &mounts {
                if let Some(rest) = value.strip_prefix(mount.as_str())
                    && (rest.is_empty() || rest.starts_with('/'))
                {
                    *value = format!("{}{rest}", dir.display());
                    break;
                }
            }
        }
        set(&mut env, "HOSTNAME".into(), pod.name_any());
        Ok(env)
    }
}

fn bytes_to_string(b: &ByteString) -> String {
    String::from_utf8_lossy(&b.0).into_owned()
}

/// Kubernetes `$(VAR)` expansion against the variables defined so far; `$$` escapes.
fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let var = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == var) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(var);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn field_value(pod: &Pod, path: &str) -> String {
    let meta = &pod.metadata;
    match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
        _ => {
            let label = |p: &str, map: &Option<BTreeMap<String, String>>| {
                p.strip_suffix("']")
                    .and_then(|k| map.as_ref()?.get(k).cloned())
                    .unwrap_or_default()
            };
            if let Some(k) = path.strip_prefix("metadata.labels['") {
                label(k, &meta.labels)
            } else if let Some(k) = path.strip_prefix("metadata.annotations['") {
                label(k, &meta.annotations)
            } else {
                String::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_kubernetes() {
        let env = vec![("A".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)", &env), "x-$(B)-$(A)");
        assert_eq!(expand("cost $5", &env), "cost $5");
    }
}
