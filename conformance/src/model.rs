//! The case model: a requirement id, its level, where the spec states it, the sentence it checks,
//! the optional hooks it needs, and the async check itself. The words a case and its context
//! share (levels, profiles, hooks, failures) are [`crate::verdict`]'s, re-exported here.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::ctx::Ctx;
pub use crate::verdict::{CaseResult, Failure, Hook, Level, Profile};

/// Cases that are SHOULD by the documents but MUST under `--profile reference` (our relay's
/// own choices: what it refuses, how, and with which code).
pub const REFERENCE_MUST: &[&str] = &[
    "MSG-017",
    "ERR-011",
    "PAY-005",
    "CALL-012",
    "TRADE-014",
    "ERR-010",
    "CH-009",
];

/// A boxed case future borrowing its context.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

/// The check of a case.
pub type CaseFn = for<'a> fn(&'a mut Ctx) -> CaseFuture<'a>;

/// One conformance case.
#[derive(Clone, Copy)]
pub struct Case {
    /// Requirement id, `AREA-NNN`.
    pub id: &'static str,
    /// MUST or SHOULD.
    pub level: Level,
    /// Where the statement is, e.g. `SPEC §Errors` or `PROTOCOL §1.1 A2`: for a MUST case a
    /// section (and row) of SPEC.md or PROTOCOL.md, checked by a test.
    pub source: &'static str,
    /// The sentence the case checks.
    pub statement: &'static str,
    /// Hooks the case needs; without them it is skipped with the reason.
    pub needs: &'static [Hook],
    /// The check.
    pub run: CaseFn,
}

impl Case {
    /// The area prefix of the id (`MSG` of `MSG-004`).
    pub fn area(&self) -> &'static str {
        self.id.split('-').next().unwrap_or(self.id)
    }

    /// Whether the case must run alone (it moves the relay's shared clock).
    pub fn exclusive(&self) -> bool {
        self.needs.contains(&Hook::ClockAdvance) || self.needs.contains(&Hook::RelayProcess)
    }

    /// The case's level under `profile` (a few SHOULD cases of the documents are MUST under
    /// [`Profile::Reference`], see [`REFERENCE_MUST`]).
    pub fn level_in(&self, profile: Profile) -> Level {
        if profile == Profile::Reference && REFERENCE_MUST.contains(&self.id) {
            Level::Must
        } else {
            self.level
        }
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("id", &self.id)
            .field("level", &self.level)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Declares a case: `case!(ID, Must, "source", "statement", [hooks], fn_name)`.
#[macro_export]
macro_rules! case {
    ($id:literal, $level:ident, $source:literal, $statement:literal, [$($hook:ident),*], $f:path) => {
        $crate::model::Case {
            id: $id,
            level: $crate::model::Level::$level,
            source: $source,
            statement: $statement,
            needs: &[$($crate::model::Hook::$hook),*],
            run: {
                fn wrap(ctx: &mut $crate::ctx::Ctx) -> $crate::model::CaseFuture<'_> {
                    Box::pin($f(ctx))
                }
                wrap
            },
        }
    };
}

/// Fails the case with a formatted reason unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !($cond) {
            return Err($crate::verdict::Failure::Fail(format!($($arg)+)));
        }
    };
}

/// Fails the case with a formatted reason.
#[macro_export]
macro_rules! fail {
    ($($arg:tt)+) => {
        return Err($crate::verdict::Failure::Fail(format!($($arg)+)))
    };
}
