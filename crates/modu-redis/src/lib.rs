//! modu-redis (work in progress).
#![deny(missing_docs)]
