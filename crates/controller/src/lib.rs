//! The Temporal Worker Controller library: connections and their lifecycle, the Temporal
//! client pool, and the WorkerDeployment pipeline (observe -> plan -> execute -> status).

pub mod connections;
pub mod controller;
pub mod error;
pub mod health;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod plan;
pub mod rbac;
pub mod reconcile;
pub mod scoped;
pub mod status;
pub mod target;
pub mod temporal;
pub mod wrt;

pub use controller::Config;
pub use manager::run;
