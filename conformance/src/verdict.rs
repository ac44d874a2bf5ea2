//! What a case's verdict is made of, shared by the cases, their context and the runner: how
//! strongly a requirement is stated ([`Level`]), whose expectations a run holds a relay to
//! ([`Profile`]), the optional test interfaces ([`Hook`]) and why a case did not pass
//! ([`Failure`]).

use std::fmt;

use serde::Serialize;

/// How strongly the spec states a requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// A failure makes the relay non-conformant (non-zero exit code).
    Must,
    /// Recommended; a failure is reported but does not fail the run.
    Should,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Must => "MUST",
            Self::Should => "SHOULD",
        })
    }
}

/// Whose expectations the run holds a relay to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// What SPEC.md and PROTOCOL.md require, and nothing else: statuses the documents do not
    /// give are any 4xx, an error's code may be in `error` or `code`, limits and lifetimes come
    /// from the relay or from flags, and what only our relay chose is not checked (the default).
    #[default]
    Documents,
    /// Today's expectations of our own relay on top: its error body `{error, message}`, its
    /// statuses and error codes, its limits (64 KiB frames, 48 KiB payloads, 32 KiB bodies),
    /// channel versions, the `channel_post` shape of ARCHITECTURE.md. Some SHOULD cases are MUST.
    Reference,
}

impl Profile {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Documents => "documents",
            Self::Reference => "reference",
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "documents" | "default" => Ok(Self::Documents),
            "reference" => Ok(Self::Reference),
            other => Err(format!(
                "unknown profile {other:?}: `documents` (what SPEC.md and PROTOCOL.md require) or `reference` (our relay's own choices too)"
            )),
        }
    }
}

/// An optional test interface a black box cannot offer on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Hook {
    /// The runner knows the payment webhook secret and acts as the payment processor.
    PaymentWebhook,
    /// The relay offers `POST /api/v1/test/advance-clock` (see README.md). Cases using it run
    /// one at a time after every other case, since the clock is shared.
    ClockAdvance,
    /// The runner listens at `--push-probe URL` as a Web Push service, and the relay accepts
    /// (and delivers to) `http://` subscription endpoints under it (see README.md).
    PushProbe,
    /// The runner started the relay from `--relay-cmd` and may `kill -9` and restart it on its
    /// data directory. Cases using it run one at a time after every other case.
    RelayProcess,
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PaymentWebhook => "payment webhook (--payment-secret)",
            Self::ClockAdvance => "test clock (--clock-hook)",
            Self::PushProbe => "push probe (--push-probe URL)",
            Self::RelayProcess => "relay process (--relay-cmd CMD)",
        })
    }
}

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The relay did something the statement forbids (or failed to do what it requires).
    Fail(String),
    /// The case could not be run (a precondition the relay or runner does not offer).
    Skip(String),
    /// A step that sets the case up (an account, a friendship, a socket, a listing…) failed:
    /// the statement was never checked. Never a pass.
    Error(String),
}

impl Failure {
    /// A failure of a setup step: `Fail` becomes `Error`, naming the step.
    pub fn in_setup(self, step: &str) -> Self {
        match self {
            Self::Fail(r) | Self::Error(r) => Self::Error(format!("setup ({step}): {r}")),
            skip @ Self::Skip(_) => skip,
        }
    }

    /// The step that failed is the one the case checks: `Error` becomes `Fail`.
    pub fn checked(self) -> Self {
        match self {
            Self::Error(r) | Self::Fail(r) => Self::Fail(r),
            skip @ Self::Skip(_) => skip,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fail(r) => write!(f, "fail: {r}"),
            Self::Skip(r) => write!(f, "skip: {r}"),
            Self::Error(r) => write!(f, "error: {r}"),
        }
    }
}

impl From<String> for Failure {
    fn from(reason: String) -> Self {
        Self::Fail(reason)
    }
}

impl From<&str> for Failure {
    fn from(reason: &str) -> Self {
        Self::Fail(reason.to_owned())
    }
}

/// What a case's check returns.
pub type CaseResult = Result<(), Failure>;
