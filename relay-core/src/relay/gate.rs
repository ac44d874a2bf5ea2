//! WebSocket upgrades held while a core that just started learns how full other shards'
//! queues are.
//!
//! A core that starts (a restart, a failover, a shard moved to this cluster node) knows nothing
//! of the queues other shards hold for their users until each of those shards answered its
//! question (`crate::handoff` levels, asked at once and again every
//! [`RESEND_MS`](crate::handoff::RESEND_MS)); until then a message to such a user is refused
//! `STORAGE_UNAVAILABLE`. The clients of a core that just started are all reconnecting, and
//! the reference clients send their unacknowledged messages right after they connect, some
//! never again after a refusal (PROTOCOL.md 5.2: the web client drops its outbox as it resends
//! it, the Android client keeps no outbox). So a core that reads ahead holds each upgrade
//! ([`Gate`]) until every other shard has answered, at most [`START_HOLD_MS`], and then lets it
//! through whatever it knows (a frame that still needs a level is refused as before). The
//! levels usually come in one round trip between shards, so nobody notices the wait.
//!
//! Bounded: at most [`MAX_HELD_UPGRADES`] wait; one more goes through at once. A relay that
//! does not read ahead answers its upgrades at once (`Relay::handle_connect` has no later
//! answer), so it holds none.

use std::collections::VecDeque;

use wire::UnixMs;

use super::Relay;
use crate::shell::{ConnId, Output, WsConnect};

/// Longest an upgrade is held for the other shards' levels after a start.
pub const START_HOLD_MS: u64 = 2_000;
/// Upgrades held at once, at most; one more goes through at once.
pub const MAX_HELD_UPGRADES: usize = 4_096;

/// The upgrades held, in the order they came (each held for the same time, so the first is
/// the first due).
#[derive(Debug, Default)]
pub(crate) struct Gate {
    held: VecDeque<(ConnId, WsConnect, UnixMs)>,
}

impl Gate {
    /// Holds `req` of `conn` until `now` + [`START_HOLD_MS`]; `Err` gives it back when
    /// [`MAX_HELD_UPGRADES`] are held.
    fn hold(&mut self, now: UnixMs, conn: ConnId, req: WsConnect) -> Result<(), WsConnect> {
        if self.held.len() >= MAX_HELD_UPGRADES {
            return Err(req);
        }
        self.held.push_back((conn, req, now.plus_ms(START_HOLD_MS)));
        Ok(())
    }

    /// The upgrades to let through now, in the order they came: all of them (`all`), or
    /// those held their longest.
    fn release(&mut self, now: UnixMs, all: bool) -> Vec<(ConnId, WsConnect)> {
        let due = if all {
            self.held.len()
        } else {
            self.held.iter().take_while(|(_, _, at)| *at <= now).count()
        };
        self.held.drain(..due).map(|(c, r, _)| (c, r)).collect()
    }

    /// When the first held upgrade is let through whatever the levels say.
    pub(crate) fn next_deadline(&self) -> Option<UnixMs> {
        self.held.front().map(|(_, _, at)| *at)
    }

    /// Forgets `conn`'s upgrade, if held; `true` if it was.
    fn forget(&mut self, conn: ConnId) -> bool {
        let before = self.held.len();
        self.held.retain(|(c, _, _)| *c != conn);
        self.held.len() != before
    }

    /// Every held upgrade, taken out.
    fn take_all(&mut self) -> Vec<ConnId> {
        self.held.drain(..).map(|(c, _, _)| c).collect()
    }

    /// Upgrades held now.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

impl Relay {
    /// Holds the upgrade `req` of `conn` while this core does not know how full the other
    /// shards' queues are (see the module doc); `Err` gives it back to be answered now.
    pub(super) fn hold_upgrade(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: WsConnect,
    ) -> Result<(), WsConnect> {
        if self.state.handoffs().levels_known() {
            return Err(req);
        }
        self.gate.hold(now, conn, req)?;
        probes::probe!("gate:upgrade-held");
        self.stats.upgrades_held += 1;
        Ok(())
    }

    /// Lets the held upgrades through that may go now: every one once the levels are known,
    /// else those held [`START_HOLD_MS`]. Each is answered as a parked upgrade is, with
    /// [`Output::Connect`] (or parked on a read).
    pub(super) fn open_gate(&mut self, now: UnixMs) {
        if self.gate.len() == 0 {
            return;
        }
        let known = self.state.handoffs().levels_known();
        for (conn, req) in self.gate.release(now, known) {
            if self.failed {
                self.refuse_held(conn);
                continue;
            }
            let _ = self.connect_ahead(now, conn, req, true);
        }
    }

    /// The shell saw `conn` close before its upgrade was answered: `true` if it was held (it
    /// is forgotten; nothing is answered).
    pub(super) fn forget_held(&mut self, conn: ConnId) -> bool {
        self.gate.forget(conn)
    }

    /// The relay failed: every held upgrade is refused as a failed commit refuses.
    pub(super) fn refuse_all_held(&mut self) {
        for conn in self.gate.take_all() {
            self.refuse_held(conn);
        }
    }

    fn refuse_held(&mut self, conn: ConnId) {
        let result = Err(super::storage_unavailable().into_response());
        self.outputs.push_back(Output::Connect { conn, result });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(n: u8) -> WsConnect {
        WsConnect {
            query: format!("user_uuid={n}"),
            protocol: None,
        }
    }

    /// Held upgrades go in the order they came: those held their longest, or all at once;
    /// one past the bound is given back; a forgotten one never comes out.
    #[test]
    fn upgrades_go_in_order_when_due_or_all_at_once() {
        let mut gate = Gate::default();
        for (n, at) in [(1, 0), (2, 500), (3, 900)] {
            gate.hold(UnixMs(at), ConnId(n), connect(n as u8)).unwrap();
        }
        assert_eq!(gate.next_deadline(), Some(UnixMs(START_HOLD_MS)));
        assert!(gate.release(UnixMs(START_HOLD_MS - 1), false).is_empty());
        let due = gate.release(UnixMs(START_HOLD_MS + 500), false);
        assert_eq!(
            due.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            [ConnId(1), ConnId(2)]
        );
        assert!(gate.forget(ConnId(3)));
        assert!(!gate.forget(ConnId(3)));
        assert_eq!(gate.next_deadline(), None);
        for n in 0..MAX_HELD_UPGRADES as u64 {
            gate.hold(UnixMs(0), ConnId(n), WsConnect::default())
                .unwrap();
        }
        assert!(gate.hold(UnixMs(0), ConnId(1 << 40), connect(9)).is_err());
        let all = gate.release(UnixMs(0), true);
        assert_eq!(all.len(), MAX_HELD_UPGRADES);
        assert_eq!(all[0].0, ConnId(0));
        assert_eq!(gate.len(), 0);
    }
}
