//! The Helm charts, rendered by the provisioned `helm` (`hack/provision.sh`): the controller
//! chart's ServiceAccount and RBAC applied to the real apiserver, then the controller run in
//! this process as that ServiceAccount (there is no container runtime for the Deployment
//! itself, which is checked by a server-side dry run instead), cluster-wide and
//! namespace-scoped. The CRDs chart renders exactly the CRDs the harness installs.

#[path = "helm/alerts.rs"]
mod alerts;
mod common;
#[path = "helm/dashboard.rs"]
mod dashboard;
#[path = "helm/end_user.rs"]
mod end_user;
#[path = "helm/install.rs"]
mod install;
#[path = "helm/render.rs"]
mod render;
#[path = "helm/twc_keys.rs"]
mod twc_keys;
#[path = "helm/twc_values.rs"]
mod twc_values;
