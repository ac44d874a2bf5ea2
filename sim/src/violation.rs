//! [`Violation`]: one broken invariant, named by the oracle that found it. A leaf of the
//! crate: the oracles, the raw clients' own observations, Jepsen mode and the shrinker all
//! produce or read it.

use std::fmt;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// Oracle name.
    pub oracle: &'static str,
    /// What was seen.
    pub detail: String,
}

impl Violation {
    /// A violation of `oracle`.
    pub fn new(oracle: &'static str, detail: impl Into<String>) -> Self {
        Self {
            oracle,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.oracle, self.detail)
    }
}
