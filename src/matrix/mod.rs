//! The speed-test matrix: plan, prefill scouts, sustained-decode cells, verdicts.
