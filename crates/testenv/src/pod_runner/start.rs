//! Starting a pod's containers: the image's local program, its arguments, and the processes.

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use super::{LocalImage, PodRunner, RunningContainer, RunningPod, Waiting, key_of, now};
use crate::process::{ChildProcess, Spec};

impl PodRunner {
    pub(super) async fn start_pod(&self, pod: &Pod) -> Result<(), Waiting> {
        let key = key_of(pod);
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_dir = self.inner.dir.join("pods").join(&key);
        let mounts_dir = pod_dir.join("volumes");
        let volumes = self
            .materialise_volumes(&ns, &spec.volumes.clone().unwrap_or_default(), &mounts_dir)
            .await?;
        let mut containers = Vec::new();
        for c in &spec.containers {
            let image = c.image.clone().unwrap_or_default();
            let local = self.lookup_image(&image).ok_or_else(|| Waiting {
                reason: "ErrImagePull",
                message: format!(
                    "no local program is registered for image {image:?} (PodRunner::register_image)"
                ),
            })?;
            let env = self.resolve_env(pod, c, &local, &volumes).await?;
            let args = container_args(c, &local);
            let cwd = pod_dir.join("containers").join(&c.name);
            std::fs::create_dir_all(&cwd).map_err(|e| Waiting {
                reason: "CreateContainerError",
                message: e.to_string(),
            })?;
            let mut proc_spec = Spec::new(
                format!("{key}/{}", c.name),
                local.program.clone(),
                self.container_log(&ns, &name, &c.name),
            )
            .args(args);
            proc_spec.env = env;
            proc_spec.inherit_env = false;
            proc_spec.cwd = Some(cwd);
            containers.push(RunningContainer {
                name: c.name.clone(),
                image,
                spec: proc_spec,
                process: None,
                restart_count: 0,
                started_at: now(),
                exited: None,
                restart_after: None,
            });
        }
        for c in containers.iter_mut() {
            match ChildProcess::start(&c.spec) {
                Ok(p) => c.process = Some(p),
                Err(e) => {
                    return Err(Waiting {
                        reason: "CreateContainerError",
                        message: e.to_string(),
                    });
                }
            }
        }
        let running = RunningPod {
            uid: pod.uid().unwrap_or_default(),
            namespace: ns,
            name,
            restart_policy: spec.restart_policy.unwrap_or_else(|| "Always".into()),
            started_at: now(),
            containers,
            last_status: None,
            ready_since: None,
        };
        if let Ok(mut pods) = self.inner.pods.lock() {
            pods.insert(key, running);
        }
        Ok(())
    }

    fn lookup_image(&self, image: &str) -> Option<LocalImage> {
        let images = self.inner.images.lock().ok()?;
        images
            .get(image)
            .or_else(|| images.get(strip_tag(image)))
            .cloned()
    }
}

/// `registry/repo:tag` -> `registry/repo`; `repo@sha256:..` -> `repo`.
fn strip_tag(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

fn container_args(c: &Container, local: &LocalImage) -> Vec<String> {
    let command = c.command.clone().unwrap_or_default();
    let args = c.args.clone();
    if command.is_empty() && args.is_none() {
        return local.args.clone();
    }
    let mut out: Vec<String> = command.into_iter().skip(1).collect();
    out.extend(args.unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_tags_and_digests_but_not_registry_ports() {
        assert_eq!(strip_tag("worker:v1"), "worker");
        assert_eq!(strip_tag("my.reg:5000/worker:v1"), "my.reg:5000/worker");
        assert_eq!(strip_tag("my.reg:5000/worker"), "my.reg:5000/worker");
        assert_eq!(strip_tag("worker@sha256:abc"), "worker");
    }
}
