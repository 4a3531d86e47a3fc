//! The workflow run executor.
