//! relay-core (in progress)
#![forbid(unsafe_code)]

pub mod config;
pub(crate) mod ids;
pub mod limits;
pub mod pow;
pub(crate) mod ratelimit;
pub mod store;
pub mod token;
