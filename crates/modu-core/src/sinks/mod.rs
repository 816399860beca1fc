//! Event sinks shipped with the core (work in progress).
