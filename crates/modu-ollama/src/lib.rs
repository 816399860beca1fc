//! modu-ollama (work in progress).
#![deny(missing_docs)]
