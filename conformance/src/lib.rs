//! Conformance: traces generated from the model, replayed against an implementation.
