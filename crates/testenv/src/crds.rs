//! Installing CustomResourceDefinitions and waiting until they are served.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::{Error, wait_for};

/// Server-side applies `crds` (idempotent, safe to call from parallel tests) and waits until
/// each is Established and its resource is listable.
pub async fn install(client: &Client, crds: &[CustomResourceDefinition]) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("twc-testenv").force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut crd = crd.clone();
        crd.metadata.managed_fields = None;
        crd.status = None;
        api.patch(&name, &pp, &Patch::Apply(&crd)).await?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        wait_for(
            &format!("CRD {name} to be Established"),
            Duration::from_secs(30),
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let crd = api.get(&name).await.map_err(|e| e.to_string())?;
                    let established = crd
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        });
                    if established {
                        Ok(())
                    } else {
                        Err(format!(
                            "conditions: {:?}",
                            crd.status.and_then(|s| s.conditions)
                        ))
                    }
                }
            },
        )
        .await?;
        // Established can precede the resource being served; wait for a list to work.
        let group = crd.spec.group.clone();
        let plural = crd.spec.names.plural.clone();
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .unwrap_or_default();
        let path = format!("/apis/{group}/{version}/{plural}?limit=1");
        wait_for(
            &format!("{plural}.{group} to be served"),
            Duration::from_secs(30),
            || {
                let client = client.clone();
                let path = path.clone();
                async move {
                    let req = http::Request::get(&path)
                        .body(Vec::new())
                        .map_err(|e| e.to_string())?;
                    client
                        .request_text(req)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await?;
    }
    Ok(())
}
