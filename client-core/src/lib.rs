//! Sans-IO SecureChat client core.
#![forbid(unsafe_code)]

pub mod crypto;
pub mod encoding;
pub mod keys;
pub mod machine;
pub mod pow;
pub mod security;
pub mod store;
