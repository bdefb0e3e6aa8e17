//! The controller library (filled in by the connection and rollout issues).
