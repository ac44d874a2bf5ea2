//! What the clients observed: the history type the client-visible oracles read. The
//! simulator builds it from its trace and the client stores (`oracles::Input`); Jepsen mode
//! builds it from its history and the client stores of real processes; both then call the
//! same oracles ([`super::delivery`], [`super::receipts`]).
//!
//! ```text
//!   acked   : (sender, id, conv, seq)  a sender's store holds its message with a seq
//!   events  : in history order, per device: logins, messages (id, conv, seq, from),
//!             status changes, read marks, typing notices
//!   members : conversation -> its pair;  aliases: every alias each client had
//!   stores  : each client's store (did the recipient's app store a message?)
//! ```

use std::collections::{BTreeMap, BTreeSet};

use client::SharedStore;
use client_core::store::{ClientStore as _, MessageStatus};

use crate::scenario::Pair;
use crate::trace::Device;

/// A message acknowledged to its sender: the sender's store holds it with a seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The sender (client index).
    pub sender: usize,
    /// Message id.
    pub id: String,
    /// Conversation.
    pub conv: String,
    /// The seq the relay gave it.
    pub seq: u64,
}

/// One thing a client's app saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'a> {
    /// A device logged in (a second-device login is a new install with a store of its own:
    /// what it is given is counted apart from what an earlier login of that device had).
    Login {
        /// Who.
        who: Device,
    },
    /// A message reached the app.
    Message {
        /// Who.
        who: Device,
        /// Message id.
        id: &'a str,
        /// Conversation.
        conv: &'a str,
        /// Its seq, if it carried one.
        seq: Option<u64>,
        /// The sender's alias, as the relay named it.
        from: Option<&'a str>,
    },
    /// The status of a message the app sent changed (`sent` on its ack, `delivered`/`read`
    /// on a receipt).
    Status {
        /// Who.
        who: Device,
        /// Message id.
        id: &'a str,
        /// The new status.
        status: MessageStatus,
    },
    /// The app marked a conversation read up to a seq.
    ReadMarked {
        /// Who.
        who: Device,
        /// Conversation.
        conv: &'a str,
        /// Up to this seq.
        seq: u64,
    },
    /// A typing notice reached the app.
    Typing {
        /// Who.
        who: Device,
        /// Conversation.
        conv: &'a str,
        /// The sender's alias.
        from: &'a str,
    },
}

/// What the client-visible oracles read.
#[derive(Debug)]
pub struct Observed<'a> {
    /// Each conversation's two members.
    pub members: BTreeMap<&'a str, Pair>,
    /// Every alias each client had, oldest first (a vanity bind adds one).
    pub aliases: &'a BTreeMap<usize, Vec<String>>,
    /// Every message acknowledged to its sender, retracted ones included.
    pub acked: &'a [Ack],
    /// Messages exempt from the delivery and receipt checks: retracted by their authors (the
    /// relay drops a still-queued copy on `retract`, and a later receipt "up to seq" covers
    /// it), and in the simulator those the expiry sweep took once their TTL had passed on the
    /// relay's clock (a later receipt covers them too).
    pub exempt: BTreeSet<&'a str>,
    /// What the apps saw, in history order (each device's events in the order it saw them).
    pub events: Vec<Seen<'a>>,
    /// Whether events of different clients are in the order they happened too: so in the
    /// simulator (one thread, simulated time); not in Jepsen mode, where each app records
    /// its events from its own task, so a receipt can be recorded a moment before the
    /// message event it answers (a client sends `delivered`, then runs its listeners).
    pub causal: bool,
    /// Each client's (primary device's) store, by client index.
    pub stores: &'a [SharedStore],
}

impl Observed<'_> {
    /// The acknowledged messages not exempt, in [`Observed::acked`] order.
    pub fn live_acks(&self) -> impl Iterator<Item = &Ack> {
        self.acked
            .iter()
            .filter(|a| !self.exempt.contains(a.id.as_str()))
    }

    /// The recipient of `ack` (the other member of its conversation), if the conversation is
    /// known.
    pub fn recipient(&self, ack: &Ack) -> Option<usize> {
        self.members
            .get(ack.conv.as_str())
            .map(|p| p.peer(ack.sender))
    }

    /// Whether client `client`'s store holds message `id`.
    pub fn stored(&self, client: usize, id: &str) -> bool {
        self.stores
            .get(client)
            .is_some_and(|s| s.snapshot().get_message(id).ok().flatten().is_some())
    }

    /// `(client, message id)` of every message event, any device.
    pub fn received_by_account(&self) -> BTreeSet<(usize, &str)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Seen::Message { who, id, .. } => Some((who.client, *id)),
                _ => None,
            })
            .collect()
    }
}

/// Every message the senders' stores hold with a seq (`stores` by client index), searched
/// conversation by conversation in `convs` order.
pub fn acked_in(stores: &[SharedStore], convs: &[&str]) -> Vec<Ack> {
    let mut out = Vec::new();
    for (client, store) in stores.iter().enumerate() {
        let snapshot = store.snapshot();
        for &conv in convs {
            for m in snapshot.get_history(conv, None, None).unwrap_or_default() {
                if let (true, Some(seq)) = (m.is_me, m.seq) {
                    out.push(Ack {
                        sender: client,
                        id: m.id,
                        conv: conv.to_owned(),
                        seq,
                    });
                }
            }
        }
    }
    out
}

/// The live acknowledged messages no app of their recipient's account received and its
/// store does not hold, by recipient (in [`Observed::acked`] order).
pub fn undelivered<'h>(h: &'h Observed<'_>) -> BTreeMap<usize, Vec<&'h Ack>> {
    let by_account = h.received_by_account();
    let mut missing: BTreeMap<usize, Vec<&Ack>> = BTreeMap::new();
    for a in h.live_acks() {
        let Some(recipient) = h.recipient(a) else {
            continue;
        };
        if !by_account.contains(&(recipient, a.id.as_str())) && !h.stored(recipient, &a.id) {
            missing.entry(recipient).or_default().push(a);
        }
    }
    missing
}

/// Whether `alias` is one of `client`'s aliases (current or retired by a bind).
pub(super) fn alias_of(
    aliases: &BTreeMap<usize, Vec<String>>,
    client: usize,
    alias: Option<&str>,
) -> bool {
    alias.is_some_and(|a| {
        aliases
            .get(&client)
            .is_some_and(|h| h.iter().any(|x| x == a))
    })
}
