//! `cfdp`, the binary's library side: the configuration's types
//! ([`config::RunConfig`] and its sections), shared by the binary and by
//! the tests that start it with a configuration built from them.
#![forbid(unsafe_code)]

pub mod config;
