//! The fenced-lease protocol of docs/protocol.md as a stateright model.
