//! Coming from TWC's chart (docs/helm.md): its values file, the values we ignore, and misspelt
//! keys.

use serde_json::json;

use crate::common::*;
use crate::render::{CHART, FULLNAME_SUFFIX, env_value, helm, helm_template, one, rules};

/// TWC's chart's default values file, verbatim (helm/temporal-worker-controller/values.yaml of
/// temporalio/temporal-worker-controller, the newest version with `workerResourceTemplate`,
/// `kubeRBACProxy` and `rbac.createEndUserRoles`).
const TWC_VALUES: &str = "crates/controller/tests/fixtures/twc-values.yaml";

/// The install notes (`templates/NOTES.txt`) of a client-side dry-run install (Helm checks
/// that the cluster is reachable even then, hence the test apiserver's kubeconfig).
async fn notes(w: &World, args: &[&str]) -> String {
    let kubeconfig = w.env.control_plane.kubeconfig_path.display().to_string();
    let mut all = vec!["install", "notes", CHART, "--dry-run=client", "-n", "notes"];
    all.extend_from_slice(&["--kubeconfig", &kubeconfig]);
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = helm(&all).await;
    assert!(ok, "helm install --dry-run {args:?} failed:\n{stderr}");
    stdout
        .split_once("NOTES:")
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| panic!("no NOTES in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twcs_values_file_renders_and_lints() -> TestResult {
    let w = world(false).await?;
    let (ok, stdout, stderr) = helm(&["lint", "--strict", CHART, "-f", TWC_VALUES]).await;
    assert!(ok, "helm lint with TWC's values:\n{stdout}\n{stderr}");

    let docs = helm_template("twc", CHART, "twc-system", &["-f", TWC_VALUES]).await;
    let fullname = format!("twc{FULLNAME_SUFFIX}");
    let deployment = one(&docs, "Deployment", &fullname);
    assert_eq!(deployment["spec"]["replicas"], 2, "TWC's replicas");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"].as_array().map(Vec::len),
        Some(1),
        "no sidecar"
    );
    assert_eq!(pod["terminationGracePeriodSeconds"], 10);
    let c = &pod["containers"][0];
    assert_eq!(
        c["resources"]["requests"]["memory"], "64Mi",
        "TWC's resources"
    );
    // TWC's securityContext.seccompProfile.enabled toggle is dropped, our defaults stay.
    assert_eq!(
        c["securityContext"]["seccompProfile"],
        json!({"type": "RuntimeDefault"})
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        pod["securityContext"]["runAsUser"], 65532,
        "podSecurityContext: {{}} keeps ours"
    );
    assert_eq!(
        env_value(c, "WRT_ALLOWED_KINDS").as_deref(),
        Some("HorizontalPodAutoscaler")
    );
    assert_eq!(env_value(c, "WATCH_NAMESPACES"), None);
    assert_eq!(
        rules(one(&docs, "ClusterRole", &format!("{fullname}-wrt-kinds"))),
        json!([{"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
                "verbs": ["create", "patch", "delete"]}])
    );
    for role in ["view", "edit"] {
        one(&docs, "ClusterRole", &format!("{fullname}-{role}"));
    }
    one(&docs, "Service", &format!("{fullname}-metrics"));

    let notes = notes(w, &["-f", TWC_VALUES]).await;
    assert!(notes.contains("TWC's Go image"), "{notes}");
    assert!(
        notes.contains("-metrics-reader"),
        "authenticated as in TWC: {notes}"
    );
    assert_eq!(env_value(c, "METRICS_AUTH").as_deref(), Some("true"));
    assert!(
        notes.contains("securityContext.seccompProfile.enabled"),
        "{notes}"
    );
    assert!(
        !notes.contains("Ignored values"),
        "TWC's defaults are not reported as ignored:\n{notes}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_twc_values_are_named_in_the_notes() -> TestResult {
    let w = world(false).await?;
    let plain = notes(w, &[]).await;
    assert!(!plain.contains("Ignored values"), "{plain}");
    for (set, key) in [
        ("webhook.enabled=true", "webhook:"),
        ("webhook.port=9000", "webhook:"),
        ("certmanager.enabled=false", "certmanager:"),
        ("certmanager.caInjectorJob.enabled=true", "certmanager:"),
        ("kubeRBACProxy.image.tag=v0.18.0", "kubeRBACProxy:"),
        ("authProxy.enabled=false", "authProxy:"),
        ("namespace.create=true", "namespace:"),
        ("prometheus.enabled=true", "prometheus:"),
        ("crds.create=true", "crds:"),
    ] {
        let n = notes(w, &["--set", set]).await;
        assert!(
            n.contains("Ignored values") && n.contains(key),
            "{set}: {n}"
        );
    }
    let same = notes(
        w,
        &[
            "--set",
            "webhook.enabled=false",
            "--set",
            "certmanager.enabled=true",
        ],
    )
    .await;
    assert!(!same.contains("Ignored values"), "TWC's defaults: {same}");
    let open = notes(w, &["--set", "metrics.disableAuth=true"]).await;
    assert!(open.contains("served to anyone"), "{open}");
    let authenticated = notes(w, &[]).await;
    assert!(authenticated.contains("-metrics-reader"), "{authenticated}");
    let off = notes(w, &["--set", "metrics.enabled=false"]).await;
    assert!(off.contains("127.0.0.1:8080"), "{off}");
    Ok(())
}

#[tokio::test]
async fn misspelt_keys_are_rejected() {
    for (set, key) in [
        ("replica=2", "replica"),
        ("rbac.crate=true", "crate"),
        ("metrics.enable=false", "enable"),
        ("webhook.enabeld=true", "enabeld"),
        ("image.pullSecret[0].name=x", "pullSecret"),
    ] {
        for cmd in ["template", "lint"] {
            let args = match cmd {
                "template" => vec!["template", "t", CHART, "--set", set],
                _ => vec!["lint", CHART, "--set", set],
            };
            let (ok, stdout, stderr) = helm(&args).await;
            let out = format!("{stdout}{stderr}");
            assert!(!ok, "helm {cmd} accepted {set}:\n{out}");
            assert!(
                out.contains("additional properties") && out.contains(&format!("'{key}'")),
                "helm {cmd} --set {set} does not name {key}:\n{out}"
            );
        }
    }
    // Wrong types too.
    let (ok, _, stderr) = helm(&["template", "t", CHART, "--set", "rbac.scope=everywhere"]).await;
    assert!(!ok && stderr.contains("scope"), "{stderr}");
}
