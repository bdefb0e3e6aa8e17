//! What a `NotFound` answer from Temporal says is missing. The server attaches a failure type
//! to its errors (`google.rpc.Status` details): `NamespaceNotFoundFailure` when the Temporal
//! namespace itself is missing, `NotFoundFailure` when the thing asked about is. Only the
//! latter means "not there": a missing namespace (a typo, a namespace not yet created, the
//! wrong server) must never read as "no worker deployment" or "version drained", which would
//! let workers be deleted. Pure.

use temporalio_client::tonic::{Code, Status};
use temporalio_common::protos::google::rpc::Status as RpcStatus;

/// What a `NotFound` said was missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The thing asked about (a worker deployment, a version, a workflow): it is not there.
    Entity,
    /// The Temporal namespace: nothing is known about what is in it.
    Namespace,
    /// A `NotFound` of no known shape: nothing is known either.
    Unrecognized,
}

const NAMESPACE_NOT_FOUND: &str = "temporal.api.errordetails.v1.NamespaceNotFoundFailure";
const NOT_FOUND: &str = "temporal.api.errordetails.v1.NotFoundFailure";

/// What `status` says is missing; None when it is not a `NotFound`. The failure type in the
/// details decides; without details (an older server, a proxy that drops trailers) only the
/// server's own wording of the two cases is recognized, and anything else is
/// [`Missing::Unrecognized`].
pub fn missing(status: &Status) -> Option<Missing> {
    if status.code() != Code::NotFound {
        return None;
    }
    let details = prost::Message::decode(status.details()).ok();
    let types: Vec<String> = details
        .map(|d: RpcStatus| d.details.into_iter().map(|a| a.type_url).collect())
        .unwrap_or_default();
    let has = |name: &str| types.iter().any(|t| t.ends_with(name));
    if has(NAMESPACE_NOT_FOUND) {
        return Some(Missing::Namespace);
    }
    if has(NOT_FOUND) {
        return Some(Missing::Entity);
    }
    if !types.is_empty() {
        return Some(Missing::Unrecognized);
    }
    let message = status.message();
    let lower = message.to_ascii_lowercase();
    Some(
        if message.starts_with("Namespace ") && lower.contains("not found") {
            Missing::Namespace
        } else if lower.starts_with("no worker deployment found")
            || lower.starts_with("worker deployment not found")
            || lower.starts_with("workflow not found")
            || lower.starts_with("sql: no rows")
        {
            Missing::Entity
        } else {
            Missing::Unrecognized
        },
    )
}

/// Whether `status` says the thing asked about is not there (and nothing else).
pub fn is_absent(status: &Status) -> bool {
    missing(status) == Some(Missing::Entity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use temporalio_common::protos::temporal::api::errordetails::v1::{
        NamespaceNotFoundFailure, NotFoundFailure,
    };

    fn with_detail(message: &str, type_url: &str, value: Vec<u8>) -> Status {
        let details = RpcStatus {
            code: Code::NotFound as i32,
            message: message.into(),
            details: vec![prost_wkt_types::Any {
                type_url: format!("type.googleapis.com/{type_url}"),
                value,
            }],
        };
        Status::with_details(Code::NotFound, message, details.encode_to_vec().into())
    }

    #[test]
    fn the_failure_type_decides() {
        let ns = NamespaceNotFoundFailure {
            namespace: "orders".into(),
        };
        let s = with_detail(
            "Namespace orders is not found.",
            NAMESPACE_NOT_FOUND,
            ns.encode_to_vec(),
        );
        assert_eq!(missing(&s), Some(Missing::Namespace));
        assert!(!is_absent(&s));
        // The wording does not matter once the type says it.
        let s = with_detail(
            "Namespace-ish words",
            NOT_FOUND,
            NotFoundFailure::default().encode_to_vec(),
        );
        assert_eq!(missing(&s), Some(Missing::Entity));
        assert!(is_absent(&s));
        let s = with_detail("gone", "example.com.OtherFailure", Vec::new());
        assert_eq!(missing(&s), Some(Missing::Unrecognized));
    }

    #[test]
    fn without_details_only_the_servers_wording_is_recognized() {
        let plain = |m: &str| Status::new(Code::NotFound, m);
        assert_eq!(
            missing(&plain("Namespace orders is not found.")),
            Some(Missing::Namespace)
        );
        assert_eq!(
            missing(&plain("no Worker Deployment found with name 'ns/wd'")),
            Some(Missing::Entity)
        );
        assert_eq!(
            missing(&plain("workflow not found for ID: gate")),
            Some(Missing::Entity)
        );
        // A deployment named like a namespace message is still not a namespace: the name
        // is inside quotes, after "no Worker Deployment found".
        assert_eq!(
            missing(&plain(
                "no Worker Deployment found with name 'Namespace x is not found.'"
            )),
            Some(Missing::Entity)
        );
        assert_eq!(
            missing(&plain("route not found")),
            Some(Missing::Unrecognized)
        );
        assert_eq!(missing(&plain("")), Some(Missing::Unrecognized));
        assert_eq!(missing(&Status::new(Code::Unavailable, "x")), None);
    }
}
