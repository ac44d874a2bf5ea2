//! The oracles of what raw clients ("strangers", `hostile`) must never achieve and
//! what the relay owes a client that stops reading:
//!
//! | oracle | checks |
//! |---|---|
//! | `authz` | requests an honest client never makes are refused: no message of a stranger in someone else's conversation is acked, committed or delivered, no receipt mark in a stranger's name (but in its conversation with its own puppet), no retract by anyone but the author lands, no friendship, order, channel or identity of someone else is taken, a rejected request stays rejected |
//! | `bad-input` | every malformed frame gets an error frame, or the socket is closed with a code (found by the raw client itself) |
//! | `stuck-client` | a client that stopped reading is closed by the relay within [`STUCK_CLOSE_BOUND_MS`] (unless the relay was powered off meanwhile: the socket died with it), and one that reads again gets a working socket |
//! | `resources` | (with a relay stats source) buffered outbound bytes per connection stay under the limit and connections are freed; today only what is observable from outside (`stuck-client`) |

use std::collections::{BTreeMap, BTreeSet};

use client_core::machine::Event;
use client_core::store::ClientStore as _;

use super::Input;
use crate::bounds::STUCK_CLOSE_BOUND_MS;
use crate::trace::Record;
use crate::violation::{Oracle, Violation};

/// What strangers must never achieve.
pub(super) fn authz(
    input: &Input<'_>,
    got: &BTreeMap<(usize, &str), u64>,
    out: &mut Vec<Violation>,
) {
    let evil: BTreeSet<&str> = input.world.evil_ids.iter().map(String::as_str).collect();
    for id in &evil {
        if input.history.accepted_ids.contains(*id) {
            out.push(Violation::new(
                Oracle::Authz,
                format!("{id}, sent by a stranger into someone else's conversation, was committed"),
            ));
        }
    }
    for (client, id) in got.keys() {
        if evil.contains(id) {
            out.push(Violation::new(
                Oracle::Authz,
                format!("c{client} received {id}, sent by a stranger into its conversation"),
            ));
        }
    }
    let strangers: BTreeSet<&str> = input
        .world
        .strangers
        .values()
        .map(|(uuid, _)| uuid.as_str())
        .collect();
    // A stranger's own conversations (with its puppet) are its to acknowledge in.
    for key in &input.history.receipt_marks {
        let conv = key.split('/').next().unwrap_or_default();
        if !input.world.puppet_convs.contains(conv)
            && key.split('/').any(|part| strangers.contains(part))
        {
            out.push(Violation::new(
                Oracle::Authz,
                format!("a receipt mark in a stranger's name was committed ({key})"),
            ));
        }
    }
    for r in input.records {
        if let Record::Event {
            who,
            event: Event::Retracted { id },
            ..
        } = r
            && !input.world.honest_retracts.contains(id)
            && input.world.sent_ids.contains_key(id)
        {
            out.push(Violation::new(
                Oracle::Authz,
                format!("{who} saw {id} retracted, but its author never retracted it"),
            ));
        }
    }
    rejections_stand(input, out);
}

/// A rejected friend request leaves no session with the stranger.
fn rejections_stand(input: &Input<'_>, out: &mut Vec<Violation>) {
    for r in &input.scenario.rejections {
        let Some((_, alias)) = input.world.strangers.get(&r.stranger) else {
            continue;
        };
        if input.world.rejected.get(&r.stranger).copied().unwrap_or(0) == 0 {
            continue;
        }
        let store = input.stores[r.client].snapshot();
        if store.load_session_by_alias(alias).ok().flatten().is_some() {
            out.push(Violation::new(
                Oracle::Authz,
                format!(
                    "c{} has a session with stranger {alias} who rejected its request",
                    r.client
                ),
            ));
        }
    }
}

/// A client that stopped reading was closed within the bound (seen from outside: its host's
/// socket was reset).
pub(super) fn stuck_clients(input: &Input<'_>, out: &mut Vec<Violation>) {
    // A relay powered off while the client was stuck took the socket with it: the restarted
    // relay never knew it, and turmoil sends the client no reset. (When it really powered
    // off: a store fault's crash happens at a later commit than its plan event.)
    for s in &input.world.stuck {
        let window = s.stopped_ms..=s.stopped_ms + STUCK_CLOSE_BOUND_MS;
        if input.world.relay_off_ms.iter().any(|t| window.contains(t)) {
            continue;
        }
        if s.must_close && s.closed_ms.is_none() {
            out.push(Violation::new(
                Oracle::StuckClient,
                format!(
                    "{} stopped reading at {} ms and provoked {} answers ({}); the relay had not closed its socket {STUCK_CLOSE_BOUND_MS} ms later",
                    s.host,
                    s.stopped_ms,
                    s.provoke,
                    s.blocked_ms.map_or_else(
                        || "its writes never blocked".to_owned(),
                        |b| format!("the relay stopped reading it at {b} ms")
                    )
                ),
            ));
        }
    }
    // Resource bounds beyond what is visible from outside need the relay's stats (not
    // exposed yet): the samples are empty and check nothing.
    resources(
        &[],
        ResourceLimits {
            per_connection_bytes: u64::MAX,
            slack_connections: 0,
        },
        0,
        out,
    );
}

/// A relay stats sample: the resource oracle's input once the relay server exposes one (open
/// connections, bytes buffered for sockets). Nothing provides it yet; see [`resources`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Sockets the relay holds.
    pub open_connections: u64,
    /// Bytes queued for sockets, over all of them.
    pub buffered_outbound_bytes: u64,
    /// The largest queue of one socket, in bytes.
    pub max_buffered_per_connection_bytes: u64,
}

/// Limits the resource oracle holds a stats source to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Most bytes queued for one socket.
    pub per_connection_bytes: u64,
    /// Most sockets beyond the run's own (clients, strangers' sockets).
    pub slack_connections: u64,
}

/// The resource oracle over stats samples `(simulated ms, stats)`: per-connection buffers
/// under the limit at every sample; after every stuck client was closed, the relay holds no
/// more sockets than the run opened. An empty sample list checks nothing (today's relay
/// exposes no stats; the stuck-client oracle covers what is visible from outside).
pub fn resources(
    samples: &[(u64, RelayStats)],
    limits: ResourceLimits,
    expected_connections: u64,
    out: &mut Vec<Violation>,
) {
    for (t, s) in samples {
        if s.max_buffered_per_connection_bytes > limits.per_connection_bytes {
            out.push(Violation::new(
                Oracle::Resources,
                format!(
                    "at {t} ms a socket had {} bytes queued (limit {})",
                    s.max_buffered_per_connection_bytes, limits.per_connection_bytes
                ),
            ));
        }
    }
    if let Some((t, s)) = samples.last()
        && s.open_connections > expected_connections + limits.slack_connections
    {
        out.push(Violation::new(
            Oracle::Resources,
            format!(
                "at {t} ms the relay held {} sockets, {expected_connections} expected",
                s.open_connections
            ),
        ));
    }
}
