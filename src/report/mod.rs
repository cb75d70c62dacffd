//! Report model (the only `Serialize` types) and one writer per format.
