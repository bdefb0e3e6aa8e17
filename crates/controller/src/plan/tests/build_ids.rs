//! The target build ID: collisions with a running Deployment and custom build IDs.

use super::*;

#[test]
fn a_changed_template_whose_build_id_is_taken_gets_one_of_its_own() {
    use VersionStatus::Current;
    let mut wd = wd("AllAtOnce", "w:v1");
    let taken = target_of(&wd);
    // The build ID's Deployment runs another template (same image tag, another env).
    let running = world(&wd)
        .deployment(&taken, Some(1))
        .edit_deployment(&taken, |d| d.template_digest = Some("another".into()))
        .version(&taken, Current)
        .current(&taken);
    let p = plan(&wd, &conn(), &me(), &running.clone().build());
    let own = build_id::build_id_with(&wd.spec.template, None, 1);
    assert_ne!(own, taken);
    assert_eq!(
        (p.target_build_id.as_str(), p.collision_count),
        (own.as_str(), 1)
    );
    assert_eq!(
        p.apply[0].metadata.name.as_deref(),
        Some(build_id::deployment_name("w", &own).as_str())
    );
    assert!(
        !p.scale
            .iter()
            .any(|(n, _)| *n == build_id::deployment_name("w", &taken))
    );

    // Recorded in the status: the same build ID while the other template runs, and after.
    wd.status = Some(twc_api::WorkerDeploymentStatus {
        collision_count: Some(1),
        ..Default::default()
    });
    let both = running.deployment(&own, Some(1));
    let p = plan(&wd, &conn(), &me(), &both.clone().build());
    assert_eq!(
        (p.target_build_id.as_str(), p.collision_count),
        (own.as_str(), 1)
    );
    assert!(p.apply.is_empty(), "its Deployment is up to date");
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &world(&wd).deployment(&own, Some(1)).build(),
    );
    assert_eq!(p.target_build_id, own);
}

#[test]
fn without_a_collision_the_build_id_is_twc_s_and_a_custom_one_never_moves() {
    let mut wd = wd("AllAtOnce", "w:v1");
    let b = target_of(&wd);
    let p = plan(
        &wd,
        &conn(),
        &me(),
        &world(&wd).deployment(&b, Some(1)).build(),
    );
    assert_eq!(
        (p.target_build_id.as_str(), p.collision_count),
        (b.as_str(), 0)
    );

    wd.spec.worker_options.unsafe_custom_build_id = Some("mine".into());
    let o = world(&wd)
        .deployment("mine", Some(1))
        .edit_deployment("mine", |d| d.template_digest = Some("older".into()))
        .build();
    let p = plan(&wd, &conn(), &me(), &o);
    assert_eq!((p.target_build_id.as_str(), p.collision_count), ("mine", 0));
    assert_eq!(
        p.apply.len(),
        1,
        "the custom build's Deployment rolls to the new template"
    );
}
