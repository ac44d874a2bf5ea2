//! What the simulated store saw committed, for the storage oracles: every committed
//! `Messages` row (id, seq, recipient, when) and its deletion, the queues' byte ledger and its
//! peaks, tombstones, orders (and when each was confirmed), receipt marks, push targets, the
//! spent-credential set, and the store's counters.

use std::collections::{BTreeMap, BTreeSet};

use relay_core::store::{Batch, MutationRef, Table};

/// A committed `Messages` row, as the oracles need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedMessage {
    /// Message id.
    pub id: String,
    /// Conversation.
    pub conv: String,
    /// Sequence number.
    pub seq: u64,
    /// Recipient account uuid.
    pub recipient: String,
    /// Simulated ms of the commit.
    pub at_ms: u64,
    /// When the relay accepted it, on the relay's clock (the row's `at`, Unix ms).
    pub accepted_at: u64,
    /// Simulated ms the row was deleted (delivered, retracted, expired), if it was.
    pub deleted_ms: Option<u64>,
}

/// What is queued in the store, as the queue bounds count it (`relay_core::limits::
/// queued_message_bytes`), and the most each bound's subject ever held after a commit.
#[derive(Debug, Default, Clone)]
pub struct QueueLedger {
    /// Every stored message row: key -> (recipient, conversation, sender, bytes).
    live: BTreeMap<String, (String, String, String, u64)>,
    conv: BTreeMap<(String, String), (u64, u64)>,
    recipient: BTreeMap<String, (u64, u64)>,
    sender: BTreeMap<String, u64>,
    total: u64,
    /// The subjects a commit's rows touched (its peaks are taken after the whole commit).
    touched: Vec<(String, String, String)>,
    /// The most messages and bytes one conversation's queue (recipient, conversation) held.
    pub peak_conv: ((u64, u64), Option<(String, String)>),
    /// The most messages and bytes one recipient had queued.
    pub peak_recipient: ((u64, u64), Option<String>),
    /// The most bytes one sender had queued.
    pub peak_sender: (u64, Option<String>),
    /// The most bytes queued over everyone.
    pub peak_total: u64,
}

impl QueueLedger {
    fn put(&mut self, key: &str, recipient: String, conv: String, sender: String, bytes: u64) {
        if self.live.contains_key(key) {
            return;
        }
        let c = self
            .conv
            .entry((recipient.clone(), conv.clone()))
            .or_default();
        c.0 += 1;
        c.1 += bytes;
        let r = self.recipient.entry(recipient.clone()).or_default();
        r.0 += 1;
        r.1 += bytes;
        *self.sender.entry(sender.clone()).or_default() += bytes;
        self.total += bytes;
        self.touched
            .push((recipient.clone(), conv.clone(), sender.clone()));
        self.live
            .insert(key.to_owned(), (recipient, conv, sender, bytes));
    }

    fn delete(&mut self, key: &str) {
        let Some((recipient, conv, sender, bytes)) = self.live.remove(key) else {
            return;
        };
        if let Some(c) = self.conv.get_mut(&(recipient.clone(), conv)) {
            c.0 -= 1;
            c.1 -= bytes;
        }
        if let Some(r) = self.recipient.get_mut(&recipient) {
            r.0 -= 1;
            r.1 -= bytes;
        }
        if let Some(s) = self.sender.get_mut(&sender) {
            *s -= bytes;
        }
        self.total -= bytes;
    }

    /// Raises the peaks to what the subjects a commit added to hold now (after the commit:
    /// a commit's rows may come in another order than the relay took the messages).
    fn note_peaks(&mut self) {
        for (recipient, conv, sender) in std::mem::take(&mut self.touched) {
            let key = (recipient, conv);
            if let Some(&(n, b)) = self.conv.get(&key) {
                let (pn, pb) = self.peak_conv.0;
                if n > pn || b > pb {
                    self.peak_conv = ((pn.max(n), pb.max(b)), Some(key.clone()));
                }
            }
            if let Some(&(n, b)) = self.recipient.get(&key.0) {
                let (pn, pb) = self.peak_recipient.0;
                if n > pn || b > pb {
                    self.peak_recipient = ((pn.max(n), pb.max(b)), Some(key.0.clone()));
                }
            }
            if let Some(&b) = self.sender.get(&sender)
                && b > self.peak_sender.0
            {
                self.peak_sender = (b, Some(sender));
            }
        }
        self.peak_total = self.peak_total.max(self.total);
    }
}

/// What the storage oracles read.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// Messages rows by key (`recipient/conv/seq`).
    pub messages: BTreeMap<String, CommittedMessage>,
    /// Every `(author uuid, message id, conversation, seq)` a committed `Messages` row ever
    /// carried (a row key reused for another message adds an entry; `messages` keeps the
    /// first).
    pub assigned: BTreeSet<(String, String, String, u64)>,
    /// Every message id with a committed tombstone (accepted ids).
    pub accepted_ids: BTreeSet<String>,
    /// Message ids whose tombstone was committed as retracted (the relay accepted the
    /// retract), with the simulated ms of that commit.
    pub retracted_ids: BTreeMap<String, u64>,
    /// A sharded relay's retractions for another shard's recipient, by message id: when the
    /// first notice row of it was committed and when one of its rows was first deleted (the
    /// recipient's shard took it), in simulated ms.
    pub retract_notices: BTreeMap<String, (u64, Option<u64>)>,
    /// Every order id with a committed row.
    pub orders: BTreeSet<String>,
    /// When each order's row was first committed confirmed (simulated ms).
    pub confirmed_ms: BTreeMap<String, u64>,
    /// Every receipt-mark row key ever committed (`conv/reader/kind`).
    pub receipt_marks: BTreeSet<String>,
    /// Every committed receipt-mark write: `(ms, conversation, reader uuid, seq)`.
    pub mark_writes: Vec<(u64, String, String, u64)>,
    /// Every committed write of a push-targets row: `(ms, account uuid, the row's JSON)`, a
    /// deleted row as `""` (what the `push` oracle holds a "gone" deletion to).
    pub push_targets: Vec<(u64, String, String)>,
    /// An account's spent credentials in the store after every commit that added one of its:
    /// `(simulated ms, account, how many)`.
    pub spent_peaks: Vec<(u64, String, usize)>,
    /// The spent credentials in the store now: key → owning account (from the row).
    pub spent_live: BTreeMap<String, String>,
    /// How many of `spent_live` each account owns.
    pub spent_per_owner: BTreeMap<String, usize>,
    /// What is queued, and the most each queue bound's subject ever held.
    pub queued: QueueLedger,
    /// Loads whose content differed from the committed model (SQLite): `(ms, detail)`.
    pub load_mismatches: Vec<(u64, String)>,
    /// Commits attempted while the relay was powered off: `(ms)`.
    pub commits_while_off: Vec<u64>,
    /// The outbox rows in the store now (hand-offs not yet acknowledged by their recipient's
    /// shard), by key, with the simulated ms of their commit.
    pub outbox: BTreeMap<String, u64>,
    /// Leadership wins (failover topology): `(ms, host, epoch)`.
    pub terms: Vec<(u64, String, u64)>,
    /// Commits that succeeded, failed by injection, and loads.
    pub counts: Counts,
}

/// Counters of store calls.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Successful commits.
    pub commits: u64,
    /// Commits failed by an injected fault.
    pub failed: u64,
    /// Loads (relay opened or rebuilt).
    pub loads: u64,
    /// Loads failed by an injected fault.
    pub failed_loads: u64,
    /// Keyed reads that succeeded.
    pub reads: u64,
    /// Keyed reads failed by an injected fault.
    pub failed_reads: u64,
    /// Commits and loads refused because their epoch was over (failover topology).
    pub fenced: u64,
}

/// The message id a notice row's key names when it is a retraction's
/// (`{shard}/{recipient}/{conv}/retract/{id}`, relay-core's `handoff::NoticeKey`).
fn retracted_by_notice(key: &str) -> Option<String> {
    key.rsplit_once("/retract/").map(|(_, id)| id.to_owned())
}

fn json(value: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(value).ok()
}

fn text(v: &serde_json::Value, field: &str) -> String {
    v.get(field)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl History {
    /// Records what `batch` committed at simulated ms `at`.
    pub(super) fn record(&mut self, batch: &Batch, at: u64) {
        let mut spent_added: Vec<String> = Vec::new();
        let mut queue_changed = false;
        for m in batch {
            match m {
                MutationRef::Put { table, key, value }
                | MutationRef::PutExpiring {
                    table, key, value, ..
                } => match table {
                    Table::Messages => {
                        if let Some(v) = json(value) {
                            let bytes = relay_core::limits::queued_message_bytes(
                                text(&v, "id").len(),
                                text(&v, "payload").len(),
                            );
                            self.queued.put(
                                key,
                                text(&v, "recipient"),
                                text(&v, "conv_id"),
                                text(&v, "from"),
                                bytes,
                            );
                            queue_changed = true;
                            self.assigned.insert((
                                text(&v, "from"),
                                text(&v, "id"),
                                text(&v, "conv_id"),
                                v.get("seq")
                                    .and_then(serde_json::Value::as_u64)
                                    .unwrap_or(0),
                            ));
                            self.messages
                                .entry(key.to_owned())
                                .or_insert(CommittedMessage {
                                    id: text(&v, "id"),
                                    conv: text(&v, "conv_id"),
                                    seq: v
                                        .get("seq")
                                        .and_then(serde_json::Value::as_u64)
                                        .unwrap_or(0),
                                    recipient: text(&v, "recipient"),
                                    at_ms: at,
                                    accepted_at: v
                                        .get("at")
                                        .and_then(serde_json::Value::as_u64)
                                        .unwrap_or(0),
                                    deleted_ms: None,
                                });
                        }
                    }
                    Table::Tombstones => {
                        if let Some(v) = json(value) {
                            let id = text(&v, "id");
                            if v.get("retracted").and_then(serde_json::Value::as_bool) == Some(true)
                            {
                                self.retracted_ids.entry(id.clone()).or_insert(at);
                            }
                            self.accepted_ids.insert(id);
                        }
                    }
                    Table::Orders => {
                        self.orders.insert(key.to_owned());
                        if json(value).is_some_and(|v| text(&v, "state") == "confirmed") {
                            self.confirmed_ms.entry(key.to_owned()).or_insert(at);
                        }
                    }
                    Table::ReceiptMarks => {
                        self.receipt_marks.insert(key.to_owned());
                        if let Some(v) = json(value) {
                            self.mark_writes.push((
                                at,
                                text(&v, "conv_id"),
                                text(&v, "reader"),
                                v.get("seq")
                                    .and_then(serde_json::Value::as_u64)
                                    .unwrap_or(0),
                            ));
                        }
                    }
                    Table::Outbox => {
                        self.outbox.insert(key.to_owned(), at);
                    }
                    Table::PushTargets => {
                        let row = String::from_utf8_lossy(value).into_owned();
                        self.push_targets.push((at, key.to_owned(), row));
                    }
                    Table::Notices => {
                        if let Some(id) = retracted_by_notice(key) {
                            self.retract_notices.entry(id).or_insert((at, None));
                        }
                    }
                    Table::Spent => {
                        let owner = json(value).map(|v| text(&v, "owner")).unwrap_or_default();
                        if !self.spent_live.contains_key(key) {
                            *self.spent_per_owner.entry(owner.clone()).or_insert(0) += 1;
                        }
                        self.spent_live.insert(key.to_owned(), owner.clone());
                        spent_added.push(owner);
                    }
                    _ => {}
                },
                MutationRef::Delete {
                    table: Table::PushTargets,
                    key,
                } => {
                    self.push_targets.push((at, key.to_owned(), String::new()));
                }
                MutationRef::Delete {
                    table: Table::Messages,
                    key,
                } => {
                    if let Some(row) = self.messages.get_mut(key) {
                        row.deleted_ms.get_or_insert(at);
                    }
                    self.queued.delete(key);
                }
                MutationRef::Delete {
                    table: Table::Outbox,
                    key,
                } => {
                    self.outbox.remove(key);
                }
                MutationRef::Delete {
                    table: Table::Notices,
                    key,
                } => {
                    if let Some(n) =
                        retracted_by_notice(key).and_then(|id| self.retract_notices.get_mut(&id))
                    {
                        n.1.get_or_insert(at);
                    }
                }
                MutationRef::Delete {
                    table: Table::Spent,
                    key,
                } => {
                    if let Some(owner) = self.spent_live.remove(key)
                        && let Some(n) = self.spent_per_owner.get_mut(&owner)
                    {
                        *n = n.saturating_sub(1);
                    }
                }
                MutationRef::Delete { .. } | MutationRef::Expire { .. } => {}
            }
        }
        spent_added.sort_unstable();
        spent_added.dedup();
        for owner in spent_added {
            let live = self.spent_per_owner.get(&owner).copied().unwrap_or(0);
            self.spent_peaks.push((at, owner, live));
        }
        if queue_changed {
            self.queued.note_peaks();
        }
    }
}
