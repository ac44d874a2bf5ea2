//! The open connections and whose each one is: the relay's one owner of what it knows about
//! sockets (a connection's record, each user's current connection, and the highest seq pushed
//! to a user per conversation since startup).
//!
//! The invariants live here, not at the call sites: a user's current connection is always an
//! open one (closing a connection unbinds its user when it was theirs), and the highest seq
//! pushed only grows.

use std::collections::BTreeMap;

use wire::{ConvId, Seq, UnixMs, UserUuid};

use crate::rows::PairMap;
use crate::shell::{Conn, ConnId};

/// The connections of one relay (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    conns: BTreeMap<ConnId, Conn>,
    /// Each user's current connection (single session: a newer one replaces it).
    current: BTreeMap<UserUuid, ConnId>,
    /// Highest seq pushed to a user per conversation on any connection since startup.
    highest_pushed: PairMap<UserUuid, ConvId, Seq>,
}

impl Sessions {
    /// Opens `conn` as `user`'s current connection.
    #[inline]
    pub(crate) fn open(&mut self, conn: ConnId, record: Conn) {
        self.current.insert(record.user.clone(), conn);
        self.conns.insert(conn, record);
    }

    /// Closes `conn`; its user has no current connection afterwards unless a newer one
    /// replaced it. Returns what was known of it.
    #[inline]
    pub(crate) fn close(&mut self, conn: ConnId) -> Option<Conn> {
        let c = self.conns.remove(&conn)?;
        if self.current.get(&c.user) == Some(&conn) {
            self.current.remove(&c.user);
        }
        Some(c)
    }

    /// Closes every connection at once; returns their ids in order.
    pub(crate) fn close_all(&mut self) -> Vec<ConnId> {
        let ids = self.conns.keys().copied().collect();
        self.conns.clear();
        self.current.clear();
        ids
    }

    /// The record of an open connection.
    #[inline]
    pub(crate) fn get(&self, conn: ConnId) -> Option<&Conn> {
        self.conns.get(&conn)
    }

    /// The record of an open connection, to change its window, sync state or last frame.
    #[inline]
    pub(crate) fn get_mut(&mut self, conn: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(&conn)
    }

    /// Whether `conn` is open.
    #[inline]
    pub(crate) fn is_open(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// The account of an open connection.
    #[inline]
    pub(crate) fn user(&self, conn: ConnId) -> Option<&UserUuid> {
        self.conns.get(&conn).map(|c| &c.user)
    }

    /// `user`'s current connection, if any.
    #[inline]
    pub(crate) fn online(&self, user: &UserUuid) -> Option<ConnId> {
        self.current.get(user).copied()
    }

    /// Notes a frame of `conn` at `now` (its idle deadline moves on; never back).
    #[inline]
    pub(crate) fn touch(&mut self, conn: ConnId, now: UnixMs) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.last_seen = c.last_seen.max(now);
        }
    }

    /// The connections whose last frame is `idle_ms` or more before `now`, in id order.
    pub(crate) fn idle(&self, now: UnixMs, idle_ms: u64) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| now >= c.last_seen.plus_ms(idle_ms))
            .map(|(id, _)| *id)
            .collect()
    }

    /// When the first connection goes idle (none open: `None`).
    pub(crate) fn next_idle(&self, idle_ms: u64) -> Option<UnixMs> {
        self.conns
            .values()
            .map(|c| c.last_seen.plus_ms(idle_ms))
            .min()
    }

    /// The highest seq of `conv` pushed to `user` since startup (`None`: nothing yet).
    #[inline]
    pub(crate) fn highest_pushed(&self, user: &UserUuid, conv: &ConvId) -> Option<Seq> {
        self.highest_pushed.get(user, conv).copied()
    }

    /// `seq` of `conv` (`bytes` on the wire) was pushed on `conn`: its window counts it in
    /// flight and its user's highest pushed seq rises to it.
    #[inline]
    pub(crate) fn pushed(&mut self, conn: ConnId, conv: &ConvId, seq: Seq, bytes: usize) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.window.pushed_one(conv, seq, bytes);
        match self.highest_pushed.get_mut(&c.user, conv) {
            Some(h) => *h = (*h).max(seq),
            None => {
                self.highest_pushed
                    .inner_mut(&c.user)
                    .insert(conv.clone(), seq);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: u8) -> UserUuid {
        UserUuid::parse(&format!("00000000-0000-4000-8000-0000000000{n:02}")).unwrap()
    }

    #[test]
    fn a_newer_connection_replaces_the_current_one_and_closing_the_old_keeps_it() {
        let mut s = Sessions::default();
        let (a, b) = (ConnId(1), ConnId(2));
        s.open(a, Conn::new(user(1), "j1".into(), UnixMs(0)));
        s.open(b, Conn::new(user(1), "j2".into(), UnixMs(5)));
        assert_eq!(s.online(&user(1)), Some(b));
        assert!(s.close(a).is_some());
        assert_eq!(s.online(&user(1)), Some(b), "the newer one stays current");
        assert!(s.close(b).is_some());
        assert_eq!(s.online(&user(1)), None);
        assert!(s.close(b).is_none());
    }

    #[test]
    fn idle_connections_by_their_last_frame() {
        let mut s = Sessions::default();
        s.open(ConnId(1), Conn::new(user(1), "j".into(), UnixMs(0)));
        s.open(ConnId(2), Conn::new(user(2), "j".into(), UnixMs(0)));
        s.touch(ConnId(2), UnixMs(50));
        s.touch(ConnId(2), UnixMs(10));
        assert_eq!(s.next_idle(100), Some(UnixMs(100)));
        assert_eq!(s.idle(UnixMs(100), 100), vec![ConnId(1)]);
        assert_eq!(s.idle(UnixMs(150), 100), vec![ConnId(1), ConnId(2)]);
        assert_eq!(s.close_all(), vec![ConnId(1), ConnId(2)]);
        assert_eq!(s.online(&user(2)), None);
    }
}
