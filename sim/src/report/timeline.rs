//! What a report shows of one run, whoever ran it: a [`Timeline`] of lanes (one per client
//! device, with its connected spans), messages from send to delivery, fault bands and marks,
//! and the violations placed where they happened. Built from a simulator run
//! ([`Timeline::from_run`]) or a Jepsen-mode run ([`Timeline::from_jepsen`]).

use std::collections::BTreeMap;

use client_core::machine::{Event, NetworkState};
use serde_json::Value;

use crate::faults::FaultAction;
use crate::jepsen::{JepsenFault, JepsenReport};
use crate::runner::RunReport;
use crate::trace::{Device, Record};
use crate::violation::Oracle;

/// What kind of fault a band or mark is (its colour in the plots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultClass {
    /// Links: partitions, holds, latency, proxy toxics.
    Network,
    /// The relay process or host: power-offs, kills, pauses, freezes, failovers.
    Process,
    /// The relay's store: failing, slow or crashing commits.
    Storage,
    /// Clocks: jumps and skews.
    Clock,
    /// Raw clients: floods, dishonest requests, slow consumers, storms.
    Adversary,
}

impl FaultClass {
    /// A short name for legends.
    pub fn name(self) -> &'static str {
        match self {
            Self::Network => "network",
            Self::Process => "process",
            Self::Storage => "storage",
            Self::Clock => "clock",
            Self::Adversary => "adversary",
        }
    }
}

/// A fault that lasted: from `start_ms` to `end_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    /// Start, ms since the run started.
    pub start_ms: u64,
    /// End (the heal, if nothing ended it before).
    pub end_ms: u64,
    /// What it was.
    pub label: String,
    /// Its class.
    pub class: FaultClass,
}

/// A fault at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// When, ms since the run started.
    pub at_ms: u64,
    /// What it was.
    pub label: String,
    /// Its class.
    pub class: FaultClass,
}

/// One client device's row: when its socket was open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lane {
    /// `c0/d0`, `c1`, …
    pub name: String,
    /// Spans with the socket open, in ms since the run started.
    pub connected: Vec<(u64, u64)>,
}

/// One message from its send to its first delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSpan {
    /// Message id.
    pub id: String,
    /// The sender's lane.
    pub from: usize,
    /// The recipient's lane, once delivered.
    pub to: Option<usize>,
    /// When the app sent it.
    pub sent_ms: u64,
    /// When the recipient's app first showed it.
    pub delivered_ms: Option<u64>,
}

impl MessageSpan {
    /// Send-to-delivery latency, once delivered.
    pub fn latency_ms(&self) -> Option<u64> {
        self.delivered_ms.map(|d| d.saturating_sub(self.sent_ms))
    }
}

/// A violation, placed at the first moment the report can tie it to (a message or
/// conversation it names); `None` when it names none (checked at the end of the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedViolation {
    /// The oracle.
    pub oracle: String,
    /// What it saw.
    pub detail: String,
    /// Where it shows on the timeline.
    pub at_ms: Option<u64>,
}

/// Everything a report page shows of one run.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// The page's title (`seed 17`).
    pub title: String,
    /// `pass`, `fail` or `setup`.
    pub verdict: String,
    /// Facts shown in a table: scenario, plan, counts, the command that replays it.
    pub facts: Vec<(String, String)>,
    /// The run's length.
    pub end_ms: u64,
    /// The traffic window: from traffic start to the heal.
    pub traffic: Option<(u64, u64)>,
    /// Faults that lasted.
    pub bands: Vec<Band>,
    /// Faults at an instant.
    pub marks: Vec<Mark>,
    /// Client devices.
    pub lanes: Vec<Lane>,
    /// Messages.
    pub messages: Vec<MessageSpan>,
    /// Violations.
    pub violations: Vec<PlacedViolation>,
    /// The run's log lines (the trace or the history), shown folded.
    pub log: Vec<String>,
}

/// Lanes by name, in first-seen order of index.
#[derive(Default)]
struct Lanes {
    index: BTreeMap<String, usize>,
    lanes: Vec<Lane>,
    open: BTreeMap<usize, u64>,
}

impl Lanes {
    fn of(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.lanes.len();
        self.index.insert(name.to_owned(), i);
        self.lanes.push(Lane {
            name: name.to_owned(),
            connected: Vec::new(),
        });
        i
    }

    fn network(&mut self, lane: usize, connected: bool, t_ms: u64) {
        match (connected, self.open.get(&lane).copied()) {
            (true, None) => {
                self.open.insert(lane, t_ms);
            }
            (false, Some(since)) => {
                self.open.remove(&lane);
                self.lanes[lane].connected.push((since, t_ms));
            }
            _ => {}
        }
    }

    fn close(mut self, end_ms: u64) -> Vec<Lane> {
        for (lane, since) in std::mem::take(&mut self.open) {
            self.lanes[lane].connected.push((since, end_ms));
        }
        self.lanes
    }
}

/// Messages by id: the first send and the first delivery.
#[derive(Default)]
struct Messages {
    by_id: BTreeMap<String, MessageSpan>,
}

impl Messages {
    fn sent(&mut self, id: &str, from: usize, t_ms: u64) {
        self.by_id.entry(id.to_owned()).or_insert(MessageSpan {
            id: id.to_owned(),
            from,
            to: None,
            sent_ms: t_ms,
            delivered_ms: None,
        });
    }

    fn delivered(&mut self, id: &str, to: usize, t_ms: u64) {
        if let Some(m) = self.by_id.get_mut(id)
            && m.delivered_ms.is_none()
        {
            m.to = Some(to);
            m.delivered_ms = Some(t_ms);
        }
    }

    fn into_vec(self) -> Vec<MessageSpan> {
        let mut v: Vec<MessageSpan> = self.by_id.into_values().collect();
        v.sort_by(|a, b| (a.sent_ms, &a.id).cmp(&(b.sent_ms, &b.id)));
        v
    }
}

impl Timeline {
    /// The timeline of a simulator run; `replay` is the command that runs it again.
    pub fn from_run(report: &RunReport, replay: &str) -> Self {
        let mut lanes = Lanes::default();
        let mut messages = Messages::default();
        let lane_name = |who: &Device| {
            if who.device == 0 {
                format!("c{}", who.client)
            } else {
                who.to_string()
            }
        };
        for record in &report.records {
            match record {
                Record::Sent { t_ms, who, id, .. } => {
                    let lane = lanes.of(&lane_name(who));
                    messages.sent(id, lane, *t_ms);
                }
                Record::Event { t_ms, who, event } => {
                    let lane = lanes.of(&lane_name(who));
                    match event {
                        Event::NetworkState(state) => {
                            lanes.network(lane, *state == NetworkState::Connected, *t_ms);
                        }
                        Event::Message(m) if !m.is_me => messages.delivered(&m.id, lane, *t_ms),
                        _ => {}
                    }
                }
                Record::ReadMarked { .. } | Record::Note { .. } => {}
            }
        }
        let end_ms = u64::try_from(report.simulated.as_millis()).unwrap_or(u64::MAX);
        let traffic = report
            .traffic_start_ms
            .map(|start| (start, report.heal_ms.unwrap_or(end_ms)));
        let (bands, marks) = traffic.map_or_else(Default::default, |(start, heal)| {
            sim_faults(report, start, heal)
        });
        let messages = messages.into_vec();
        let violations = report
            .violations
            .iter()
            .map(|v| place(v.oracle.name(), &v.detail, &messages))
            .collect();
        let verdict = if report.violations.iter().any(|v| v.oracle == Oracle::Setup) {
            "setup"
        } else if report.violations.is_empty() {
            "pass"
        } else {
            "fail"
        };
        Self {
            title: format!("seed {}", report.seed),
            verdict: verdict.to_owned(),
            facts: vec![
                ("scenario".into(), report.scenario.to_string()),
                ("fault plan".into(), report.plan.to_string()),
                (
                    "counts".into(),
                    format!(
                        "{} conversations of {} pairs, {} acked, {} received, {} receipts, {} commits ({} failed), {} store loads",
                        report.stats.conversations,
                        report.stats.pairs,
                        report.stats.acked,
                        report.stats.received,
                        report.stats.receipts,
                        report.stats.commits,
                        report.stats.failed_commits,
                        report.stats.loads
                    ),
                ),
                ("trace sha256".into(), report.trace_hash.clone()),
                ("replay".into(), replay.to_owned()),
            ],
            end_ms,
            traffic,
            bands,
            marks,
            lanes: lanes.close(end_ms),
            messages,
            violations,
            log: report.trace.clone(),
        }
    }

    /// The timeline of a Jepsen-mode run; `again` is the command that runs its seed again.
    pub fn from_jepsen(report: &JepsenReport, again: &str) -> Self {
        let mut lanes = Lanes::default();
        let mut messages = Messages::default();
        let mut faults = JepsenFaults::default();
        let end_ms = report.history.last().map_or(0, |e| e.t_ms);
        for entry in &report.history {
            let t = entry.t_ms;
            match entry.client {
                Some(c) => {
                    let lane = lanes.of(&format!("c{c}"));
                    jepsen_client_entry(&entry.what, lane, t, &mut lanes, &mut messages);
                }
                None => faults.entry(&entry.what, t),
            }
        }
        let traffic = faults
            .traffic_start
            .map(|s| (s, faults.heal.unwrap_or(end_ms)));
        let (bands, marks) = faults.finish(traffic.map_or(end_ms, |(_, heal)| heal));
        let messages = messages.into_vec();
        let violations = report
            .violations
            .iter()
            .map(|v| {
                let (oracle, detail) = split_violation(v);
                place(oracle, detail, &messages)
            })
            .collect();
        Self {
            title: format!("Jepsen seed {}", report.seed),
            verdict: format!("{:?}", report.verdict).to_lowercase(),
            facts: vec![
                ("relay".into(), report.target.clone()),
                ("counts".into(), report.counts.to_string()),
                (
                    "plan".into(),
                    report
                        .plan
                        .iter()
                        .map(|e| format!("+{} ms {}", e.at_ms, jepsen_fault_label(&e.fault)))
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                ("run again".into(), again.to_owned()),
            ],
            end_ms,
            traffic,
            bands,
            marks,
            lanes: lanes.close(end_ms),
            messages,
            violations,
            log: report
                .history
                .iter()
                .map(|e| {
                    let who = e.client.map_or_else(|| "-".to_owned(), |c| format!("c{c}"));
                    format!("{:>8} {who:>3} {}", e.t_ms, e.what)
                })
                .collect(),
        }
    }
}

/// `[oracle] detail` as Jepsen mode words its violations.
fn split_violation(v: &str) -> (&str, &str) {
    v.strip_prefix('[')
        .and_then(|rest| rest.split_once("] "))
        .unwrap_or(("violation", v))
}

/// Places a violation at the earliest time of a message it names (its send, or its
/// delivery when the send is not known).
fn place(oracle: &str, detail: &str, messages: &[MessageSpan]) -> PlacedViolation {
    let at_ms = messages
        .iter()
        .filter(|m| m.id.len() >= 8 && detail.contains(m.id.as_str()))
        .map(|m| m.sent_ms)
        .min();
    PlacedViolation {
        oracle: oracle.to_owned(),
        detail: detail.to_owned(),
        at_ms,
    }
}

/// The fault plan's events that ran (those due before the heal), as bands and marks.
fn sim_faults(report: &RunReport, start: u64, heal: u64) -> (Vec<Band>, Vec<Mark>) {
    let mut open: BTreeMap<String, (u64, String, FaultClass)> = BTreeMap::new();
    let mut bands = Vec::new();
    let mut marks = Vec::new();
    for event in &report.plan.events {
        let t = start + event.at_ms;
        if t >= heal {
            break;
        }
        let label = event.action.to_string();
        match classify(&event.action) {
            Shape::Opens(key, class) => {
                if let Some((s, l, c)) = open.insert(key, (t, label, class)) {
                    bands.push(band(s, t, l, c));
                }
            }
            Shape::Closes(key) => {
                if let Some((s, l, c)) = open.remove(&key) {
                    bands.push(band(s, t, l, c));
                }
            }
            Shape::Lasts(ms, class) => bands.push(band(t, (t + ms).min(heal), label, class)),
            Shape::Instant(class) => marks.push(Mark {
                at_ms: t,
                label,
                class,
            }),
        }
    }
    for (_, (s, l, c)) in open {
        bands.push(band(s, heal, l, c));
    }
    for record in &report.records {
        if let Record::Note { t_ms, text } = record
            && (text.starts_with("relay powers off") || text.starts_with("the active relay is"))
        {
            marks.push(Mark {
                at_ms: *t_ms,
                label: text.clone(),
                class: FaultClass::Process,
            });
        }
    }
    bands.sort_by_key(|b| b.start_ms);
    marks.sort_by_key(|m| m.at_ms);
    (bands, marks)
}

fn band(start_ms: u64, end_ms: u64, label: String, class: FaultClass) -> Band {
    Band {
        start_ms,
        end_ms,
        label,
        class,
    }
}

/// How a fault action shows: it opens a band a later action closes (same key), lasts a
/// given time, or is an instant.
enum Shape {
    Opens(String, FaultClass),
    Closes(String),
    Lasts(u64, FaultClass),
    Instant(FaultClass),
}

fn classify(action: &FaultAction) -> Shape {
    use FaultClass::{Adversary, Clock, Network, Process, Storage};
    match action {
        FaultAction::Partition { a, b } => Shape::Opens(format!("link {a} {b}"), Network),
        FaultAction::Repair { a, b } => Shape::Closes(format!("link {a} {b}")),
        FaultAction::PartitionOneway { from, to } => {
            Shape::Opens(format!("oneway {from} {to}"), Network)
        }
        FaultAction::RepairOneway { from, to } => Shape::Closes(format!("oneway {from} {to}")),
        FaultAction::Hold { a, b } => Shape::Opens(format!("hold {a} {b}"), Network),
        FaultAction::Release { a, b } => Shape::Closes(format!("hold {a} {b}")),
        FaultAction::MaxLatency { .. } => Shape::Opens("latency".into(), Network),
        FaultAction::Crash { host } => Shape::Opens(format!("power {host}"), Process),
        FaultAction::Restart { host } => Shape::Closes(format!("power {host}")),
        FaultAction::Freeze { ms } | FaultAction::Leave { ms } => Shape::Lasts(*ms, Process),
        FaultAction::StoreDown { ms }
        | FaultAction::StallCommit { ms }
        | FaultAction::ShardStoreDown { ms, .. }
        | FaultAction::ShardCommitSlow { ms, .. } => Shape::Lasts(*ms, Storage),
        FaultAction::Crossings { ms, .. }
        | FaultAction::CutFromStore { ms }
        | FaultAction::CutFromBalancer { ms } => Shape::Lasts(*ms, Network),
        FaultAction::FailCommits { .. }
        | FaultAction::FailReads { .. }
        | FaultAction::CrashAfterCommit { .. }
        | FaultAction::CrashMidBatch { .. }
        | FaultAction::ShardCommitsFail { .. }
        | FaultAction::CrashAfterCommitOf { .. } => Shape::Instant(Storage),
        FaultAction::ClockJump { .. }
        | FaultAction::WorldJump { .. }
        | FaultAction::SetSkew { .. } => Shape::Instant(Clock),
        FaultAction::Hostile { .. } => Shape::Instant(Adversary),
    }
}

/// A client's history entry: sends, deliveries and its socket's state.
fn jepsen_client_entry(
    what: &Value,
    lane: usize,
    t_ms: u64,
    lanes: &mut Lanes,
    messages: &mut Messages,
) {
    if let Some(id) = what.get("send").and_then(Value::as_str) {
        messages.sent(id, lane, t_ms);
    } else if let Some(id) = what.get("message").and_then(Value::as_str) {
        if what.get("is_me").and_then(Value::as_bool) != Some(true) {
            messages.delivered(id, lane, t_ms);
        }
    } else if let Some(state) = what.get("network").and_then(Value::as_str) {
        lanes.network(lane, state == "Connected", t_ms);
    }
}

/// Jepsen mode's faults as they ran: phases, proxy toxics, kills and pauses.
#[derive(Default)]
struct JepsenFaults {
    traffic_start: Option<u64>,
    heal: Option<u64>,
    proxy: Option<(u64, String)>,
    down: Option<(u64, String)>,
    bands: Vec<Band>,
    marks: Vec<Mark>,
}

impl JepsenFaults {
    fn entry(&mut self, what: &Value, t: u64) {
        match what.get("phase").and_then(Value::as_str) {
            Some("traffic") => self.traffic_start = Some(t),
            Some("healed") => self.heal = Some(t),
            _ => {}
        }
        if let Some(fault) = what.get("fault") {
            self.fault(fault, t);
        }
        if let Some(relay) = what.get("relay").and_then(Value::as_str)
            && let Some((s, label)) = self.down.take()
        {
            self.bands.push(band(s, t, label, FaultClass::Process));
            self.marks.push(Mark {
                at_ms: t,
                label: format!("relay {relay}"),
                class: FaultClass::Process,
            });
        }
    }

    fn fault(&mut self, fault: &Value, t: u64) {
        let Ok(fault) = serde_json::from_value::<JepsenFault>(fault.clone()) else {
            return;
        };
        let label = jepsen_fault_label(&fault);
        match fault {
            JepsenFault::ProxyPhase { .. } => {
                if let Some((s, l)) = self.proxy.replace((t, label)) {
                    self.bands.push(band(s, t, l, FaultClass::Network));
                }
            }
            JepsenFault::ProxyClear => {
                if let Some((s, l)) = self.proxy.take() {
                    self.bands.push(band(s, t, l, FaultClass::Network));
                }
            }
            JepsenFault::Kill { .. } | JepsenFault::Pause { .. } => self.down = Some((t, label)),
        }
    }

    fn finish(mut self, heal: u64) -> (Vec<Band>, Vec<Mark>) {
        if let Some((s, l)) = self.proxy.take() {
            self.bands.push(band(s, heal, l, FaultClass::Network));
        }
        if let Some((s, l)) = self.down.take() {
            self.bands.push(band(s, heal, l, FaultClass::Process));
        }
        self.bands.sort_by_key(|b| b.start_ms);
        (self.bands, self.marks)
    }
}

fn jepsen_fault_label(fault: &JepsenFault) -> String {
    match fault {
        JepsenFault::ProxyPhase { toxics } => format!("proxy: {toxics}"),
        JepsenFault::ProxyClear => "proxy clear".to_owned(),
        JepsenFault::Kill { restart_after_ms } => {
            format!("kill -9, restart after {restart_after_ms} ms")
        }
        JepsenFault::Pause { for_ms } => format!("SIGSTOP for {for_ms} ms"),
    }
}
