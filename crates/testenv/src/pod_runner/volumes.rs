//! A pod's volumes written to disk (Secret, ConfigMap, emptyDir; hostPath as is), and the reads
//! of Secrets and ConfigMaps that volumes and the environment share.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Volume};
use kube::Api;

use super::{PodRunner, Waiting};

impl PodRunner {
    /// Writes Secret, ConfigMap and emptyDir volumes; returns volume name -> directory.
    pub(super) async fn materialise_volumes(
        &self,
        ns: &str,
        volumes: &[Volume],
        dir: &Path,
    ) -> Result<HashMap<String, PathBuf>, Waiting> {
        let mut out = HashMap::new();
        for v in volumes {
            let vdir = dir.join(&v.name);
            std::fs::create_dir_all(&vdir).map_err(|e| Waiting {
                reason: "CreateContainerConfigError",
                message: e.to_string(),
            })?;
            let mut files: Vec<(String, Vec<u8>)> = Vec::new();
            if let Some(s) = &v.secret {
                let name = s.secret_name.clone().unwrap_or_default();
                let optional = s.optional.unwrap_or(false);
                match self.secret(ns, &name).await {
                    Some(secret) => {
                        let data = secret.data.unwrap_or_default();
                        files.extend(select_items(&data, s.items.as_deref(), |b| b.0.clone()));
                    }
                    None if optional => {}
                    None => {
                        return Err(Waiting {
                            reason: "CreateContainerConfigError",
                            message: format!("secret \"{name}\" not found"),
                        });
                    }
                }
            } else if let Some(c) = &v.config_map {
                let name = c.name.clone();
                let optional = c.optional.unwrap_or(false);
                match self.config_map(ns, &name).await {
                    Some(cm) => {
                        let data = cm.data.unwrap_or_default();
                        files.extend(select_items(&data, c.items.as_deref(), |s| {
                            s.clone().into_bytes()
                        }));
                    }
                    None if optional => {}
                    None => {
                        return Err(Waiting {
                            reason: "CreateContainerConfigError",
                            message: format!("configmap \"{name}\" not found"),
                        });
                    }
                }
            } else if let Some(h) = &v.host_path {
                out.insert(v.name.clone(), PathBuf::from(&h.path));
                continue;
            }
            for (path, bytes) in files {
                let p = vdir.join(path);
                if let Some(parent) = p.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                std::fs::write(&p, bytes).map_err(|e| Waiting {
                    reason: "CreateContainerConfigError",
                    message: format!("{}: {e}", p.display()),
                })?;
            }
            out.insert(v.name.clone(), vdir);
        }
        Ok(out)
    }

    pub(super) async fn secret(&self, ns: &str, name: &str) -> Option<Secret> {
        Api::<Secret>::namespaced(self.inner.client.clone(), ns)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }

    pub(super) async fn config_map(&self, ns: &str, name: &str) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.inner.client.clone(), ns)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }
}

fn select_items<V>(
    data: &BTreeMap<String, V>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    bytes: impl Fn(&V) -> Vec<u8>,
) -> Vec<(String, Vec<u8>)> {
    match items {
        Some(items) if !items.is_empty() => items
            .iter()
            .filter_map(|i| data.get(&i.key).map(|v| (i.path.clone(), bytes(v))))
            .collect(),
        _ => data.iter().map(|(k, v)| (k.clone(), bytes(v))).collect(),
    }
}
