//! Schema helpers for fields that hold arbitrary JSON.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value, kept as given (`x-kubernetes-preserve-unknown-fields`).
pub fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Any JSON object, kept as given.
pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Bytes, base64-encoded in JSON.
pub fn bytes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "byte" })
}
