//! modu-otel (work in progress).
#![deny(missing_docs)]
