//! stub

use crate::model::Case;

/// Cases of this area.
pub const CASES: &[Case] = &[];
