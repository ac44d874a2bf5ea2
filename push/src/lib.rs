//! x
pub mod ece;
