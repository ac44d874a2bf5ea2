//! The application-level trace: what each app saw and did, stamped with simulated time.
//!
//! Records are structured (the oracles read them) and render to one line each (the trace the
//! determinism check hashes). Transport-level details that are not deterministic under turmoil
//! (hyper's `Date` header, tungstenite's mask RNG) never reach it.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use client_core::machine::Event;
use client_core::store::MessageStatus;
use sha2::{Digest as _, Sha256};

/// Who recorded: client index and device (0 = the primary, 1 = a second-device login).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Device {
    /// Client index.
    pub client: usize,
    /// Device number.
    pub device: u8,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}/d{}", self.client, self.device)
    }
}

/// One trace record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// An app event.
    Event {
        /// Simulated ms since the run started.
        t_ms: u64,
        /// Who.
        who: Device,
        /// What.
        event: Event,
    },
    /// The app queued a message.
    Sent {
        /// Simulated ms.
        t_ms: u64,
        /// Who.
        who: Device,
        /// Message id.
        id: String,
        /// Conversation.
        conv: String,
    },
    /// The app sent a read receipt.
    ReadMarked {
        /// Simulated ms.
        t_ms: u64,
        /// Who.
        who: Device,
        /// Conversation.
        conv: String,
        /// Up to this seq.
        seq: u64,
    },
    /// A note from the script or the runner (phases, faults, refusals).
    Note {
        /// Simulated ms.
        t_ms: u64,
        /// Text.
        text: String,
    },
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Event { t_ms, who, event } => write!(f, "{t_ms:>8} {who} {}", summary(event)),
            Self::Sent {
                t_ms,
                who,
                id,
                conv,
            } => {
                write!(f, "{t_ms:>8} {who} sent {id} in {conv}")
            }
            Self::ReadMarked {
                t_ms,
                who,
                conv,
                seq,
            } => write!(f, "{t_ms:>8} {who} read {conv} up to {seq}"),
            Self::Note { t_ms, text } => write!(f, "{t_ms:>8} -- {text}"),
        }
    }
}

fn status_name(s: MessageStatus) -> &'static str {
    s.as_str()
}

fn summary(event: &Event) -> String {
    match event {
        Event::Message(m) => format!(
            "message {} conv {} seq {:?} from {:?}",
            m.id, m.conversation_id, m.seq, m.from_alias_id
        ),
        Event::StatusChange { id, status } => format!("status {id} {}", status_name(*status)),
        Event::NetworkState(s) => format!("network {s:?}"),
        Event::Typing {
            from_alias_id,
            conversation_id,
        } => format!("typing {from_alias_id} in {conversation_id}"),
        Event::Goaway(r) => format!("goaway {r}"),
        Event::Authenticated {
            alias_id,
            recovered,
            ..
        } => format!("authenticated {alias_id} recovered={recovered}"),
        Event::AuthFailed(f) => format!("auth failed {f:?}"),
        Event::ContactsSynced(list) => format!("contacts synced ({})", list.len()),
        Event::Retracted { id } => format!("retracted {id}"),
        Event::Parked {
            id,
            conversation_id,
        } => format!("parked {id} in {conversation_id}"),
        Event::PaymentConfirmed { order_id, ref_id } => {
            format!("payment confirmed {order_id} {ref_id}")
        }
        Event::ChannelPost(_) => "channel post".to_owned(),
        Event::SecurityViolation(_) => "security violation".to_owned(),
        Event::PeerKeyChanged { alias_id, .. } => format!("peer key changed {alias_id}"),
        Event::CallSignal { kind, from, .. } => format!("call signal {kind:?} from {from}"),
        Event::Call(call) => format!("call {call:?}"),
        Event::OfflineInboxFull {
            conversation_id,
            limit,
        } => format!("offline inbox full in {conversation_id} ({limit:?})"),
    }
}

/// A shared, append-only trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    records: Arc<Mutex<Vec<Record>>>,
}

impl Trace {
    /// Appends a record.
    pub fn push(&self, record: Record) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }

    /// The newest record `select` accepts (searched from the end; only it is cloned).
    pub fn last(&self, select: impl Fn(&Record) -> bool) -> Option<Record> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .rev()
            .find(|r| select(r))
            .cloned()
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Renders records to lines.
pub fn lines(records: &[Record]) -> Vec<String> {
    records.iter().map(ToString::to_string).collect()
}

/// SHA-256 of the lines (each followed by `\n`), hex.
pub fn hash(lines: &[String]) -> String {
    let mut h = Sha256::new();
    for l in lines {
        h.update(l.as_bytes());
        h.update(b"\n");
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
