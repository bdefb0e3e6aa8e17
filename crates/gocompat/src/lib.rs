//! What the Go Temporal Worker Controller computes with Go libraries, reproduced byte for byte,
//! so build IDs made here equal TWC's:
//!
//! - [`json::pod_template_spec`]: the bytes of Go's `json.Marshal` of a `corev1.PodTemplateSpec`
//!   (k8s.io/api v0.36.3), from the JSON of the template; these bytes are what TWC hashes.
//! - [`quantity::canonical`]: `resource.Quantity`'s canonical string.
//! - [`reference::parse`]: `github.com/distribution/reference.Parse`, as TWC reads it for the
//!   build ID's image prefix.
//!
//! No IO, one dependency (`serde_json`). The field table in [`fields`] is generated from the Go
//! types by `hack/gofields` (run `hack/generate.sh`).

pub mod fields;
pub mod json;
pub mod quantity;
pub mod reference;
pub mod schema;
mod time;

pub use json::{GoJsonError, pod_template_spec};
pub use quantity::{QuantityError, canonical};
pub use reference::{ImageRef, parse as parse_reference};
