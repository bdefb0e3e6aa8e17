//! The Temporal Worker Controller library: connections and their lifecycle, the Temporal
//! client pool, and the WorkerDeployment pipeline (observe -> plan -> execute -> status).

pub mod access;
pub mod cached;
pub mod chaos_break;
pub mod children;
pub mod conditions;
pub mod config;
pub mod connections;
pub mod controller;
pub mod error;
pub mod events;
pub mod health;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod metrics_auth;
pub mod observed;
pub mod plan;
pub mod rbac;
pub mod restarts;
pub mod rights;
pub mod scoped;
pub mod temporal;
pub mod worker_pods;
pub mod workerdeployment;
pub mod writes;
pub mod wrt;

#[cfg(test)]
mod layout;

pub use controller::Config;
pub use manager::run;
