//! modu-openai (work in progress).
#![deny(missing_docs)]
