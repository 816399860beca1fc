//! modu-mcp (work in progress).
#![deny(missing_docs)]
