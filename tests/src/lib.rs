//! Shared harness for tuic's end-to-end tests: starting real binaries and talking to them.

pub mod records;
pub mod term;
