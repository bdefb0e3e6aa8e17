//! temporal.io/v1alpha1 API types (filled in by the API issue).
