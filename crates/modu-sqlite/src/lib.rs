//! modu-sqlite (work in progress).
#![deny(missing_docs)]
