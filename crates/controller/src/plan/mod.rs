//! The planner: pure functions from (spec, observed Kubernetes state, observed Temporal state,
//! now) to a plan. No client in sight.

pub mod build_id;
