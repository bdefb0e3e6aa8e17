//! The controller as a user installs it, on a real node: the image built here
//! (`hack/image.sh`), the chart installed with `helm install --wait` into a namespace that
//! enforces the restricted Pod Security Standard, and worker pods that are containers of the
//! example worker image under containerd and a real kubelet. The kubelet's own crash-loop
//! back-off, readiness probes, SIGTERM and grace periods drive what is checked here; no part of
//! it is played by the project's pod runner.
//!
//! Needs root and the node's packages (`hack/provision.sh`), and the image archives
//! (`hack/image.sh --profile dev`; `hack/test.sh` builds them). When the machine lacks a piece,
//! every test here fails and names it.

#[path = "real_node/groups.rs"]
mod groups;
#[path = "real_node/install.rs"]
mod install;
#[path = "real_node/node.rs"]
mod node;
#[path = "real_node/prometheus.rs"]
mod prometheus;
#[path = "real_node/rollouts.rs"]
mod rollouts;
#[path = "real_node/workers.rs"]
mod workers;

use std::time::Duration;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The namespace and release of the controller, as a user would name them.
const SYSTEM: &str = "twc-system";
const RELEASE: &str = "twc";
/// The example worker image as `hack/image.sh` names it.
const WORKER_IMAGE: &str = "twc/example-worker:0.1.0";
/// The controller image the chart's default values name (repository `temporal-worker-controller`,
/// tag the chart's appVersion).
const CONTROLLER_IMAGE: &str = "temporal-worker-controller:0.1.0";
const ROLLOUT: Duration = Duration::from_secs(180);
