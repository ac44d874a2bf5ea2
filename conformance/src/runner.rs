//! Selecting, running and judging cases: bounded parallelism, a per-case timeout, hooks, and the
//! expected-failures list.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::ctx::{Ctx, Shared};
use crate::model::{Case, Failure, Hook, Level};
use crate::transcript::Entry;
use crate::transport::TransportFactory;

/// How a case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Passed.
    Pass,
    /// Failed and was not expected to.
    Fail,
    /// Failed, as the expected-failures file says.
    ExpectedFail,
    /// Passed although the expected-failures file says it fails.
    UnexpectedPass,
    /// Not run (missing hook, or the case found a precondition missing).
    Skip,
    /// A step that sets the case up failed (an account, a friendship, a socket…): the
    /// statement was never checked.
    Error,
}

impl Status {
    /// Short label for the terminal.
    pub fn label(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "FAIL",
            Self::ExpectedFail => "xfail",
            Self::UnexpectedPass => "XPASS",
            Self::Skip => "skip",
            Self::Error => "ERROR",
        }
    }
}

/// The outcome of one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    /// Requirement id.
    pub id: &'static str,
    /// Area prefix.
    pub area: &'static str,
    /// MUST / SHOULD under the run's profile.
    pub level: Level,
    /// Spec section.
    pub source: &'static str,
    /// The sentence checked.
    pub statement: &'static str,
    /// Outcome.
    pub status: Status,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
    /// The expected-failures entry's reason, if listed.
    pub expected_reason: Option<String>,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Wire transcript, secrets redacted.
    pub transcript: Vec<Entry>,
    /// The network faults the case ran under (`--faults`); for a rerun, the rerun's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<crate::transport::CaseFaults>,
    /// Under faults: the first attempt, when it failed on connections that drew a destructive
    /// toxic and the case was run again with the destructive toxics off (the verdict is the
    /// rerun's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_attempt: Option<FirstAttempt>,
}

/// A failed first attempt under destructive toxics (see [`run_one`]).
#[derive(Debug, Clone, Serialize)]
pub struct FirstAttempt {
    /// Why it failed.
    pub reason: String,
    /// The faults it ran under.
    pub faults: crate::transport::CaseFaults,
}

/// The expected-failures list: id → reason.
pub type ExpectedFailures = BTreeMap<String, String>;

/// Parses an expected-failures file: one `ID reason…` per line, `#` comments, blank lines.
/// Every entry must have a reason.
pub fn parse_expected_failures(text: &str) -> Result<ExpectedFailures, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (id, reason) = line
            .split_once(char::is_whitespace)
            .map(|(i, r)| (i, r.trim()))
            .unwrap_or((line, ""));
        if reason.is_empty() {
            return Err(format!("line {}: `{id}` has no reason", n + 1));
        }
        if out.insert(id.to_owned(), reason.to_owned()).is_some() {
            return Err(format!("line {}: `{id}` is listed twice", n + 1));
        }
    }
    Ok(out)
}

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Cases run at once.
    pub jobs: usize,
    /// Per-case timeout.
    pub timeout: Duration,
    /// Only ids equal to or starting with one of these (empty: all).
    pub only: Vec<String>,
    /// Skip ids equal to or starting with one of these.
    pub skip: Vec<String>,
    /// Expected failures.
    pub expected: ExpectedFailures,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            jobs: 4,
            timeout: Duration::from_secs(30),
            only: Vec::new(),
            skip: Vec::new(),
            expected: BTreeMap::new(),
        }
    }
}

fn matches(id: &str, patterns: &[String]) -> bool {
    patterns
        .iter()
        .any(|p| id == p || id.starts_with(p.as_str()))
}

/// The cases `cfg` selects, in registry order.
pub fn select(cases: &[Case], cfg: &RunConfig) -> Vec<Case> {
    cases
        .iter()
        .filter(|c| cfg.only.is_empty() || matches(c.id, &cfg.only))
        .filter(|c| !matches(c.id, &cfg.skip))
        .copied()
        .collect()
}

/// The wall clock, only to measure case durations for the report.
#[allow(
    clippy::disallowed_methods,
    reason = "the runner reports how long each case took; no case logic reads this clock"
)]
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}

fn missing_hook(case: &Case, shared: &Shared) -> Option<Hook> {
    case.needs.iter().copied().find(|h| match h {
        Hook::PaymentWebhook => shared.hooks.payment_secret.is_none(),
        Hook::ClockAdvance => shared.hooks.clock.is_none(),
        Hook::PushProbe => shared.hooks.push_probe.is_none(),
        Hook::RelayProcess => shared.hooks.process.is_none(),
    })
}

/// Why a case that needs `hook` is skipped, and how to enable it.
fn skip_reason(hook: Hook) -> String {
    match hook {
        Hook::RelayProcess => {
            "needs the relay process: give --relay-cmd 'CMD … {listen} … {data}' \
             so the runner starts your relay, kills it (-9) and restarts it on the same data \
             directory"
                .to_owned()
        }
        other => format!("needs the {other}"),
    }
}

/// One run of a case's body on `transport`, within `timeout`.
async fn attempt(
    case: Case,
    transport: Arc<dyn crate::transport::Transport>,
    shared: Arc<Shared>,
    timeout: Duration,
    n: u64,
) -> (Result<(), Failure>, Vec<Entry>) {
    let mut ctx = Ctx::attempt(transport, shared, case.id, n);
    let r = match tokio::time::timeout(timeout, (case.run)(&mut ctx)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Fail(format!(
            "timed out after {} s",
            timeout.as_secs()
        ))),
    };
    // A reason names what the case did to the relay before it (a clock advance, a restart).
    let r = match (r, ctx.steps()) {
        (Err(Failure::Fail(why)), Some(steps)) => {
            Err(Failure::Fail(format!("{steps}, then: {why}")))
        }
        (Err(Failure::Error(why)), Some(steps)) => {
            Err(Failure::Error(format!("{steps}, then: {why}")))
        }
        (r, _) => r,
    };
    (r, ctx.transcript.entries())
}

/// Runs one case (hook check, timeout, expected-failure judgement) on `transport`.
///
/// Under faults, a case that fails after one of its connections drew a destructive toxic (a
/// reset, a timeout, a data limit, a half-open socket: the case's own client does not
/// reconnect and retry) is run once more on a fresh proxy with only the toxics that slow,
/// slice and stall; the verdict is the rerun's, and the report keeps the first attempt's
/// reason and faults ([`CaseReport::first_attempt`]). So every case ends with a verdict on a
/// relay that has just been through the resets, and a relay that breaks under them (crashes,
/// loses state, stops answering) fails the rerun or the cases after it.
pub async fn run_one(
    case: Case,
    transport: Arc<dyn crate::transport::Transport>,
    shared: Arc<Shared>,
    timeout: Duration,
    expected: Option<String>,
) -> CaseReport {
    let start = wall_clock();
    let faulted = transport.faults().is_some();
    let mut transport = transport;
    let mut first_attempt = None;
    let level = case.level_in(shared.profile);
    let (outcome, transcript) = if let Some(hook) = missing_hook(&case, &shared) {
        (Err(Failure::Skip(skip_reason(hook))), Vec::new())
    } else if faulted && case.exclusive() {
        let why = "not meaningful under network faults: it moves the relay's clock or restarts \
                   the relay for every case, and times its frames";
        (Err(Failure::Skip(why.to_owned())), Vec::new())
    } else {
        let (r, transcript) = attempt(
            case,
            Arc::clone(&transport),
            Arc::clone(&shared),
            timeout,
            0,
        )
        .await;
        let faults = transport.faults();
        match (r, faults, transport.calmer()) {
            (Err(Failure::Fail(reason) | Failure::Error(reason)), Some(faults), Some(calmer))
                if faults.drew_destructive() =>
            {
                first_attempt = Some(FirstAttempt { reason, faults });
                transport = calmer;
                attempt(case, Arc::clone(&transport), shared, timeout, 1).await
            }
            (r, _, _) => (r, transcript),
        }
    };
    let (status, reason) = match (outcome, expected.is_some()) {
        (Ok(()), false) => (Status::Pass, None),
        (Ok(()), true) => (
            Status::UnexpectedPass,
            Some("listed as an expected failure but passed".to_owned()),
        ),
        (Err(Failure::Skip(r)), _) => (Status::Skip, Some(r)),
        (Err(Failure::Error(r)), _) => (Status::Error, Some(r)),
        (Err(Failure::Fail(r)), false) => (Status::Fail, Some(r)),
        (Err(Failure::Fail(r)), true) => (Status::ExpectedFail, Some(r)),
    };
    CaseReport {
        id: case.id,
        area: case.area(),
        level,
        source: case.source,
        statement: case.statement,
        status,
        reason,
        expected_reason: expected,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        transcript,
        faults: transport.faults(),
        first_attempt,
    }
}

/// Runs `cases`: the independent ones in parallel (at most `cfg.jobs` at once), then the ones that
/// move the relay's clock, one at a time. Reports come back in registry order.
pub async fn run(
    cases: &[Case],
    transports: TransportFactory,
    shared: Arc<Shared>,
    cfg: &RunConfig,
    on_done: &(dyn Fn(&CaseReport) + Sync),
) -> Vec<CaseReport> {
    let mut reports: BTreeMap<usize, CaseReport> = BTreeMap::new();
    let sem = Arc::new(tokio::sync::Semaphore::new(cfg.jobs.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (i, case) in cases.iter().enumerate().filter(|(_, c)| !c.exclusive()) {
        let (case, transport, shared, sem) =
            (*case, transports(i), Arc::clone(&shared), Arc::clone(&sem));
        let (timeout, expected) = (cfg.timeout, cfg.expected.get(case.id).cloned());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (i, run_one(case, transport, shared, timeout, expected).await)
        });
    }
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, report)) => {
                on_done(&report);
                reports.insert(i, report);
            }
            Err(e) => tracing::error!(error = %e, "a case task panicked"),
        }
    }
    for (i, case) in cases.iter().enumerate().filter(|(_, c)| c.exclusive()) {
        let report = run_one(
            *case,
            transports(i),
            Arc::clone(&shared),
            cfg.timeout,
            cfg.expected.get(case.id).cloned(),
        )
        .await;
        on_done(&report);
        reports.insert(i, report);
    }
    reports.into_values().collect()
}

/// Whether a run is a failure: any MUST case failed unexpectedly, or any MUST case could not
/// be set up (an `error` is never a pass).
pub fn must_failed(reports: &[CaseReport]) -> bool {
    reports
        .iter()
        .any(|r| matches!(r.status, Status::Fail | Status::Error) && r.level == Level::Must)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_failures_need_reasons() {
        let ok = parse_expected_failures("# c\n\nMSG-001  not yet: reason here\n").unwrap();
        assert_eq!(ok["MSG-001"], "not yet: reason here");
        assert!(parse_expected_failures("MSG-001\n").is_err());
        assert!(parse_expected_failures("A-1 r\nA-1 r\n").is_err());
    }

    #[test]
    fn selection_by_id_or_prefix() {
        assert!(matches("MSG-004", &["MSG".into()]));
        assert!(matches("MSG-004", &["MSG-004".into()]));
        assert!(!matches("MSG-004", &["RCPT".into()]));
    }
}
