//! modu-skills (work in progress).
#![deny(missing_docs)]
