//! The sender's shard's side of a submitted `msg` or `retract`: each one sent to its
//! conversation's owner is kept until its verdict comes, and sent again every [`RESEND_MS`]
//! until then (the owner answers a repeated `msg` by the message's id, as a resend: the same
//! seq, nothing stored twice; a repeated `retract` finds the message retracted already). A
//! submission lost on its way, or a verdict lost on its way back, so never leaves its sender
//! waiting on an open connection for an `ack` that cannot come, nor a retraction undone.
//! A `retract` has no answer on the wire: its verdict is [`Reply::Taken`], or a refusal.
//!
//! A submission is kept while its connection is open: a closed one's client sends its
//! unacknowledged messages again on its next connection. At most [`MAX_SUBMISSIONS_WAITING`]
//! are kept per shard; one past it is sent once, as any crossing, and a loss then waits for
//! the client's next connection.

use std::collections::{BTreeMap, BTreeSet};

use wire::{MessageId, UnixMs};

use super::{RESEND_MS, Reply, Submission, Submitted};

/// Submissions without a verdict that one shard keeps, and sends again, at most.
pub const MAX_SUBMISSIONS_WAITING: usize = 4_096;

/// What a submission is, with the id of the message it names.
type Key = (Kind, MessageId);

/// The frame a submission carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Msg,
    Retract,
}

/// The submissions of a sender's shard waiting for their verdicts: by connection, frame and
/// message id, with when each is sent again.
#[derive(Debug, Clone, Default)]
pub struct Submissions {
    /// Connection -> (frame, message id) -> (the submission, when it is sent again).
    waiting: BTreeMap<u64, BTreeMap<Key, (Submission, UnixMs)>>,
    /// (when it is sent again, connection, (frame, id)), soonest first.
    schedule: BTreeSet<(UnixMs, u64, Key)>,
    /// How many wait, over every connection.
    len: usize,
}

/// What `s` is.
fn key_of(s: &Submission) -> Key {
    match &s.frame {
        Submitted::Msg(m) => (Kind::Msg, m.id.clone()),
        Submitted::Retract(r) => (Kind::Retract, r.id.clone()),
    }
}

/// What `reply` answers (`None`: no submission).
fn answers(reply: &Reply) -> Option<Key> {
    match reply {
        Reply::Ack { id, .. } => Some((Kind::Msg, id.clone())),
        Reply::Taken { id } => Some((Kind::Retract, id.clone())),
        Reply::Error { ref_type, id, .. } => {
            let kind = match ref_type.as_str() {
                "msg" => Kind::Msg,
                "retract" => Kind::Retract,
                _ => return None,
            };
            let id = MessageId::parse(id.as_deref()?).ok()?;
            Some((kind, id))
        }
    }
}

/// What [`Submissions::sent`] did with a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Kept until its verdict comes: none like it waited.
    Kept,
    /// The same frame of the same connection waited: this one replaces it.
    Again,
    /// Not kept: [`MAX_SUBMISSIONS_WAITING`] wait already.
    NotKept,
}

impl Submissions {
    /// `s` was sent at `now`: it is kept until its verdict comes, unless
    /// [`MAX_SUBMISSIONS_WAITING`] wait already. Sent again while the same one waits, it
    /// replaces it.
    pub fn sent(&mut self, s: &Submission, now: UnixMs) -> Sent {
        let key = key_of(s);
        let held = self
            .waiting
            .get(&s.conn)
            .is_some_and(|c| c.contains_key(&key));
        if !held && self.len >= MAX_SUBMISSIONS_WAITING {
            return Sent::NotKept;
        }
        let at = now.plus_ms(RESEND_MS);
        let conn = self.waiting.entry(s.conn).or_default();
        let sent = match conn.insert(key.clone(), (s.clone(), at)) {
            Some((_, old)) => {
                self.schedule.remove(&(old, s.conn, key.clone()));
                Sent::Again
            }
            None => {
                self.len += 1;
                Sent::Kept
            }
        };
        self.schedule.insert((at, s.conn, key));
        sent
    }

    /// The verdict `reply` for a frame of connection `conn` came: its submission no longer
    /// waits. `true` if one did.
    pub fn answered(&mut self, conn: u64, reply: &Reply) -> bool {
        let Some(waiting) = self.waiting.get_mut(&conn) else {
            return false;
        };
        let Some((id, (_, at))) = answers(reply).and_then(|key| waiting.remove_entry(&key)) else {
            return false;
        };
        if waiting.is_empty() {
            self.waiting.remove(&conn);
        }
        self.schedule.remove(&(at, conn, id));
        self.len -= 1;
        true
    }

    /// Connection `conn` closed: its submissions are no longer sent again (its client sends
    /// its messages again on its next connection).
    pub fn closed(&mut self, conn: u64) {
        for (id, (_, at)) in self.waiting.remove(&conn).unwrap_or_default() {
            self.schedule.remove(&(at, conn, id));
            self.len -= 1;
        }
    }

    /// The submissions whose verdicts did not come by `now`, to send again; each is due
    /// again [`RESEND_MS`] later.
    pub fn due(&mut self, now: UnixMs) -> Vec<Submission> {
        let mut again = Vec::new();
        let next = now.plus_ms(RESEND_MS);
        while let Some((at, conn, key)) = self.schedule.first().cloned() {
            if at > now {
                break;
            }
            self.schedule.pop_first();
            if let Some((s, due)) = self.waiting.get_mut(&conn).and_then(|c| c.get_mut(&key)) {
                *due = next;
                again.push(s.clone());
                self.schedule.insert((next, conn, key));
            }
        }
        again
    }

    /// When the next submission is due again (`None`: none waits).
    pub fn next_deadline(&self) -> Option<UnixMs> {
        self.schedule.first().map(|(at, _, _)| *at)
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::ShardId;
    use wire::{ErrorCode, Seq, UserUuid};

    fn msg(conn: u64, id: &str) -> Submission {
        let frame: wire::frames::MsgFrame = serde_json::from_value(serde_json::json!({
            "id": id, "to": "bob_1", "conv_id": "c-1", "payload": "AA"
        }))
        .unwrap();
        Submission {
            from: ShardId(0),
            to: ShardId(1),
            conn,
            author: UserUuid::parse("00000000-0000-4000-8000-000000000001").unwrap(),
            frame: Submitted::Msg(frame),
        }
    }

    fn retract(conn: u64, id: &str) -> Submission {
        let frame: wire::frames::RetractFrame = serde_json::from_value(serde_json::json!({
            "id": id, "to": "bob_1", "conv_id": "c-1"
        }))
        .unwrap();
        Submission {
            frame: Submitted::Retract(frame),
            ..msg(conn, id)
        }
    }

    fn ids(due: &[Submission]) -> Vec<(u64, String)> {
        due.iter()
            .map(|s| match &s.frame {
                Submitted::Msg(m) => (s.conn, m.id.to_string()),
                Submitted::Retract(r) => (s.conn, format!("retract {}", r.id)),
            })
            .collect()
    }

    fn refusal(ref_type: &str, id: &str) -> Reply {
        Reply::Error {
            code: ErrorCode::NOT_THE_AUTHOR,
            words: String::new(),
            ref_type: ref_type.into(),
            id: Some(id.into()),
        }
    }

    #[test]
    fn a_retraction_waits_for_its_own_verdict_beside_its_message() {
        let mut subs = Submissions::default();
        subs.sent(&msg(1, "m1"), UnixMs(0));
        subs.sent(&retract(1, "m1"), UnixMs(0));
        assert_eq!(subs.len(), 2);
        let ack = Reply::Ack {
            id: MessageId::parse("m1").unwrap(),
            seq: Seq(1),
            new: true,
        };
        assert!(subs.answered(1, &ack));
        assert_eq!(
            ids(&subs.due(UnixMs(RESEND_MS))),
            [(1, "retract m1".into())]
        );
        assert!(
            !subs.answered(1, &refusal("msg", "m1")),
            "not the retraction's"
        );
        let taken = Reply::Taken {
            id: MessageId::parse("m1").unwrap(),
        };
        assert!(subs.answered(1, &taken));
        assert!(subs.is_empty());
        subs.sent(&retract(1, "m2"), UnixMs(0));
        assert!(subs.answered(1, &refusal("retract", "m2")));
        assert!(subs.is_empty());
    }

    #[test]
    fn a_submission_without_a_verdict_goes_again_every_resend_period() {
        let mut subs = Submissions::default();
        assert_eq!(subs.sent(&msg(1, "m1"), UnixMs(0)), Sent::Kept);
        assert!(subs.due(UnixMs(RESEND_MS - 1)).is_empty());
        assert_eq!(ids(&subs.due(UnixMs(RESEND_MS))), [(1, "m1".into())]);
        assert!(subs.due(UnixMs(RESEND_MS + 1)).is_empty());
        assert_eq!(subs.next_deadline(), Some(UnixMs(2 * RESEND_MS)));
        assert_eq!(ids(&subs.due(UnixMs(2 * RESEND_MS))), [(1, "m1".into())]);
    }

    #[test]
    fn an_ack_or_a_refusal_ends_the_wait_and_other_verdicts_do_not() {
        let mut subs = Submissions::default();
        subs.sent(&msg(1, "m1"), UnixMs(0));
        subs.sent(&msg(1, "m2"), UnixMs(0));
        assert!(!subs.answered(1, &refusal("typing", "m1")));
        assert!(!subs.answered(
            2,
            &Reply::Ack {
                id: MessageId::parse("m1").unwrap(),
                seq: Seq(1),
                new: true
            }
        ));
        let ack = Reply::Ack {
            id: MessageId::parse("m1").unwrap(),
            seq: Seq(1),
            new: true,
        };
        assert!(subs.answered(1, &ack));
        assert!(!subs.answered(1, &ack), "answered once");
        assert!(subs.answered(1, &refusal("msg", "m2")));
        assert!(subs.is_empty());
        assert_eq!(subs.next_deadline(), None);
    }

    #[test]
    fn a_closed_connection_forgets_its_submissions_and_the_bound_holds() {
        let mut subs = Submissions::default();
        subs.sent(&msg(1, "m1"), UnixMs(0));
        subs.sent(&msg(2, "m1"), UnixMs(0));
        subs.closed(1);
        assert_eq!(ids(&subs.due(UnixMs(RESEND_MS))), [(2, "m1".into())]);
        assert_eq!(subs.len(), 1);
        for n in 1..MAX_SUBMISSIONS_WAITING {
            assert_eq!(subs.sent(&msg(3, &format!("n{n}")), UnixMs(0)), Sent::Kept);
        }
        assert_eq!(
            subs.sent(&msg(3, "over"), UnixMs(0)),
            Sent::NotKept,
            "past the bound"
        );
        assert_eq!(
            subs.sent(&msg(2, "m1"), UnixMs(5)),
            Sent::Again,
            "one waiting may be sent again"
        );
        assert_eq!(subs.len(), MAX_SUBMISSIONS_WAITING);
    }
}
