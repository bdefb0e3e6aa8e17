//! TWC's integration scenarios (its `TestIntegration` subtests), against the real environment:
//! kube-apiserver, kube-controller-manager, the Temporal dev server, and the example worker
//! run as real processes for the versioned Deployments. Each test is one TWC subtest, with the
//! name in snake case (`6th-`/`7th-` become `sixth_`/`seventh_`); where our controller differs
//! on purpose, the scenario says so and checks our behaviour.
//!
//! Not here (other work in progress): rate limiting.
//!
//! Scenarios run concurrently in the background; see `scenarios/runner.rs`.

mod common;
#[path = "scenarios/conditions.rs"]
mod conditions;
#[path = "scenarios/deletion.rs"]
mod deletion;
#[path = "scenarios/gates.rs"]
mod gates;
#[path = "scenarios/groups.rs"]
mod groups;
#[path = "scenarios/guard.rs"]
mod guard;
#[path = "scenarios/harness.rs"]
mod harness;
#[path = "scenarios/identity.rs"]
mod identity;
#[path = "scenarios/limits.rs"]
mod limits;
#[path = "scenarios/rollout.rs"]
mod rollout;
#[path = "scenarios/runner.rs"]
mod runner;
#[path = "scenarios/takeover.rs"]
mod takeover;
#[path = "scenarios/unknown.rs"]
mod unknown;
#[path = "scenarios/wrt.rs"]
mod wrt;

use common::TestResult;

/// One libtest test per scenario, and the table the runner starts them from. Longest first:
/// the runner starts them in this order.
macro_rules! scenarios {
    ($($name:ident => $body:path,)*) => {
        const NAMES: &[&str] = &[$(stringify!($name)),*];

        fn body(
            name: &str,
            w: &'static common::World,
        ) -> Option<futures::future::BoxFuture<'static, ()>> {
            match name {
                $(stringify!($name) => Some(Box::pin($body(w))),)*
                _ => None,
            }
        }

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() -> TestResult {
                runner::outcome(stringify!($name), NAMES, body).await.map_err(Into::into)
            }
        )*
    };
}

scenarios! {
    wrt_current_version_without_pollers_is_reported =>
        wrt::wrt_current_version_without_pollers_is_reported,
    a_crash_looping_ramp_is_rolled_back_before_its_deadline =>
        guard::a_crash_looping_ramp_is_rolled_back_before_its_deadline,
    rollout_controls_work_mid_rollout => guard::rollout_controls_work_mid_rollout,
    a_failed_step_gate_rolls_the_ramp_back => guard::a_failed_step_gate_rolls_the_ramp_back,
    a_healthy_build_passes_its_analysis_and_is_promoted =>
        guard::a_healthy_build_passes_its_analysis_and_is_promoted,
    a_slow_build_is_not_judged_without_samples_and_shows_its_open_workflows =>
        guard::a_slow_build_is_not_judged_without_samples_and_shows_its_open_workflows,
    an_all_at_once_promotion_failing_its_analysis_is_rolled_back =>
        guard::an_all_at_once_promotion_failing_its_analysis_is_rolled_back,
    a_ramp_failing_half_its_workflows_is_rolled_back_at_the_first_step =>
        guard::a_ramp_failing_half_its_workflows_is_rolled_back_at_the_first_step,
    a_build_that_never_polls_fails_at_its_deadline_until_retried =>
        guard::a_build_that_never_polls_fails_at_its_deadline_until_retried,
    taking_over_from_twc_restarts_nothing => takeover::taking_over_from_twc_restarts_nothing,
    taking_over_another_identity_needs_the_flag =>
        takeover::taking_over_another_identity_needs_the_flag,
    a_template_whose_build_id_is_taken_gets_its_own =>
        unknown::a_template_whose_build_id_is_taken_gets_its_own,
    deletion_waits_for_pinned_workflows => deletion::deletion_waits_for_pinned_workflows,
    deletion_waits_for_pinned_workflows_where_they_were_registered =>
        deletion::deletion_waits_for_pinned_workflows_where_they_were_registered,
    deletion_waits_while_another_manager_routes_to_a_version =>
        deletion::deletion_waits_while_another_manager_routes_to_a_version,
    deletion_acts_only_where_the_cluster_connection_allows =>
        deletion::deletion_acts_only_where_the_cluster_connection_allows,
    deletion_with_workers_is_not_skipped_for_a_lost_status =>
        deletion::deletion_with_workers_is_not_skipped_for_a_lost_status,
    a_version_demoted_from_ramping_is_never_inactive =>
        unknown::a_version_demoted_from_ramping_is_never_inactive,
    a_temporal_namespace_change_moves_the_target_and_keeps_older_versions =>
        unknown::a_temporal_namespace_change_moves_the_target_and_keeps_older_versions,
    seventh_rollout_unblocked_after_pollers_die_version_deleted =>
        limits::seventh_rollout_unblocked_after_pollers_die_version_deleted,
    sixth_rollout_unblocked_after_pollers_die_max_ctrlr_versions =>
        limits::sixth_rollout_unblocked_after_pollers_die_max_ctrlr_versions,
    progressive_rollout_from_unversioned_pollers_walks_the_steps =>
        gates::progressive_rollout_from_unversioned_pollers_walks_the_steps,
    gate_input_from_config_map_and_secret => gates::gate_input_from_config_map_and_secret,
    progressive_rollout_yes_unversioned_pollers_expect_first_step =>
        gates::progressive_rollout_yes_unversioned_pollers_expect_first_step,
    manual_rollout_with_failed_gate_expect_no_current =>
        gates::manual_rollout_with_failed_gate_expect_no_current,
    all_at_once_rollout_with_failed_gate_expect_no_current =>
        gates::all_at_once_rollout_with_failed_gate_expect_no_current,
    progressive_rollout_with_failed_gate => gates::progressive_rollout_with_failed_gate,
    progressive_rollout_success_gate_expect_first_step =>
        gates::progressive_rollout_success_gate_expect_first_step,
    manual_rollout_with_success_gate_expect_no_current =>
        gates::manual_rollout_with_success_gate_expect_no_current,
    all_at_once_with_success_gate_expect_current =>
        gates::all_at_once_with_success_gate_expect_current,
    progressive_rollout_with_gate_no_current_expect_all_at_once =>
        gates::progressive_rollout_with_gate_no_current_expect_all_at_once,
    manual_rollout_blocked_at_max_versions_ineligible_for_deletion =>
        limits::manual_rollout_blocked_at_max_versions_ineligible_for_deletion,
    all_at_once_blocked_at_max_versions_ineligible_for_deletion =>
        limits::all_at_once_blocked_at_max_versions_ineligible_for_deletion,
    progressive_rollout_blocked_at_ctrlr_max_versions =>
        limits::progressive_rollout_blocked_at_ctrlr_max_versions,
    manual_rollout_unblocked_after_manager_identity_cleared =>
        identity::manual_rollout_unblocked_after_manager_identity_cleared,
    all_at_once_unblocked_after_manager_identity_cleared =>
        identity::all_at_once_unblocked_after_manager_identity_cleared,
    progressive_rollout_unblocked_after_manager_identity_cleared =>
        identity::progressive_rollout_unblocked_after_manager_identity_cleared,
    manual_rollout_blocked_by_manager_identity =>
        identity::manual_rollout_blocked_by_manager_identity,
    all_at_once_rollout_blocked_by_manager_identity =>
        identity::all_at_once_rollout_blocked_by_manager_identity,
    progressive_rollout_blocked_by_manager_identity =>
        identity::progressive_rollout_blocked_by_manager_identity,
    manual_rollout_scale_down_deprecated_versions =>
        rollout::manual_rollout_scale_down_deprecated_versions,
    all_at_once_expect_scale_down_deprecated_versions =>
        rollout::all_at_once_expect_scale_down_deprecated_versions,
    deletion_sets_current_to_unversioned => deletion::deletion_sets_current_to_unversioned,
    deletion_removes_connection_finalizer => deletion::deletion_removes_connection_finalizer,
    manual_rollout_custom_build_expect_rolling_update =>
        rollout::manual_rollout_custom_build_expect_rolling_update,
    deployment_strategy_reaches_every_version =>
        rollout::deployment_strategy_reaches_every_version,
    worker_groups_roll_out_as_one_version => groups::worker_groups_roll_out_as_one_version,
    spec_deployment_takes_over_from_spec_template_without_a_new_version =>
        rollout::spec_deployment_takes_over_from_spec_template_without_a_new_version,
    a_version_that_never_served_waits_for_its_workflows_then_is_retired =>
        rollout::a_version_that_never_served_waits_for_its_workflows_then_is_retired,
    all_at_once_rollback_expect_immediate_promotion =>
        rollout::all_at_once_rollback_expect_immediate_promotion,
    progressive_rollout_expect_first_step => rollout::progressive_rollout_expect_first_step,
    manual_rollout_yes_unversioned_pollers_expect_no_current =>
        rollout::manual_rollout_yes_unversioned_pollers_expect_no_current,
    all_at_once_yes_unversioned_pollers_expect_current =>
        rollout::all_at_once_yes_unversioned_pollers_expect_current,
    wrt_multiple_active_versions => wrt::wrt_multiple_active_versions,
    wrt_gone_deployment_deletes_copy => wrt::wrt_gone_deployment_deletes_copy,
    wrt_autoscaler_deleted_at_sunset => wrt::wrt_autoscaler_deleted_at_sunset,
    wrt_scaler_owns_replicas => wrt::wrt_scaler_owns_replicas,
    wrt_apply_failure => wrt::wrt_apply_failure,
    wrt_ssa_idempotency => wrt::wrt_ssa_idempotency,
    wrt_creates_hpa_per_build_id => wrt::wrt_creates_hpa_per_build_id,
    wrt_owner_ref => wrt::wrt_owner_ref,
    wrt_matchlabels_injection => wrt::wrt_matchlabels_injection,
    wrt_multiple_wrts_same_twd => wrt::wrt_multiple_wrts_same_twd,
    wrt_metric_selector_injection => wrt::wrt_metric_selector_injection,
    wrt_scaletargetref_empty_object_sentinel => wrt::wrt_scaletargetref_empty_object_sentinel,
    wrt_worker_deployment_not_found => wrt::wrt_worker_deployment_not_found,
    wrt_worker_group_not_found => wrt::wrt_worker_group_not_found,
    manual_rollout_expect_no_change => rollout::manual_rollout_expect_no_change,
    manual_rollout_expect_deployments_scaled_up =>
        rollout::manual_rollout_expect_deployments_scaled_up,
    progressive_rollout_no_unversioned_pollers_expect_all_at_once =>
        rollout::progressive_rollout_no_unversioned_pollers_expect_all_at_once,
    conditions_progressing => conditions::conditions_progressing,
    conditions_ready_reason_rollout_complete => conditions::conditions_ready_reason_rollout_complete,
    conditions_missing_connection => conditions::conditions_missing_connection,
    conditions_client_creation_failed => conditions::conditions_client_creation_failed,
    conditions_temporal_state_fetch_failed => conditions::conditions_temporal_state_fetch_failed,
    rate_limit_burst_surfaces_error => conditions::rate_limit_burst_surfaces_error,
}
