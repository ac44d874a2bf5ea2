//! Contacts (F1-F4): friend requests, accept (creates the conversation), reject, list; and
//! the `friend_request` / `friend_accepted` pushes to online users.
//!
//! Rules: one friendship per pair of accounts. A request to yourself is 400, to an unknown
//! alias 404, when a pending or accepted friendship exists 409 "already exists". After a
//! rejection either side may ask again (the row is reused, status back to `pending`). Only the
//! addressee may accept (idempotent: accepting again returns the same conversation) or reject
//! (no notification to the requester).

use wire::frames::{FriendAcceptedFrame, FriendRequestFrame};
use wire::http::{
    AcceptFriendBody, AcceptFriendResponse, FriendDirection, FriendProfile, FriendRequestBody,
    FriendRequestResponse, FriendStatus, OkResponse, decode_body,
};
use wire::{ErrorCode, FriendshipId, IsoTime, Seq, ServerFrame, UnixMs, UserUuid};

use crate::cx::Cx;
use crate::handoff::{Announce, Notice, PairOp, ShardId};
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::planted::planted;
use crate::rows::{ConversationRow, FriendshipRow};
use crate::store::Table;

fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::FRIENDSHIP_NOT_FOUND,
        "no such friendship for this account",
    )
}

impl Cx<'_> {
    /// F1: every friendship of the caller, oldest first, as a bare array.
    pub(crate) fn http_friends(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let mine = self.contacts(&user)?;
        let mut list: Vec<FriendProfile> = Vec::with_capacity(mine.0.len());
        for f in mine.0 {
            let (other, direction) = if f.requester == user {
                (&f.addressee, FriendDirection::Sent)
            } else {
                (&f.requester, FriendDirection::Received)
            };
            if let Some(a) = self.account(other)? {
                list.push(FriendProfile {
                    friendship_id: f.id,
                    alias_id: a.alias_id.clone(),
                    nickname: a.nickname.clone(),
                    status: f.status,
                    direction,
                    conversation_id: f.conversation_id.clone(),
                    x25519_public_key: a.x25519_public_key,
                    ed25519_public_key: a.ed25519_public_key,
                    created_at: IsoTime(f.created_at),
                });
            }
        }
        Ok(HttpResponse::json(200, &list))
    }

    /// F2.
    pub(crate) fn http_friend_request(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: FriendRequestBody = decode_body(&req.body)?;
        let target = self
            .account_by_alias(&body.to_alias_id)?
            .map(|a| a.uuid.clone())
            .ok_or_else(|| {
                ApiError::new(ErrorCode::USER_NOT_FOUND, "no account with that alias_id")
            })?;
        // The caller's account (for the request frame), read before anything changes.
        let me = self.account(&user)?;
        if target == user {
            return Err(ApiError::new(
                ErrorCode::BAD_REQUEST,
                "you cannot send a friend request to yourself",
            ));
        }
        let announce = me.map(|a| Announce::Request {
            from: a.alias_id.clone(),
            nickname: a.nickname.clone(),
        });
        if let Some(owner) = self.pair_elsewhere(&user, &target) {
            return self.forward(owner, &user, PairOp::Request { target, announce });
        }
        self.befriend(now, &user, &target, announce).map(|(r, _)| r)
    }

    /// F2 at the pair's owner shard (this one): `user` asks `target`; `announce` is the
    /// `friend_request` frame for `target`.
    pub(crate) fn befriend(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        target: &UserUuid,
        announce: Option<Announce>,
    ) -> Result<(HttpResponse, FriendshipRow), ApiError> {
        // The lists of this shard's members are written with the friendship: read first (the
        // lower member is this shard's, and its list has every friendship of the pair).
        let lower = user.min(target);
        let existing = self.with_contacts(lower, |c| c.with(user.max(target)).cloned())?;
        self.read_local_contacts([user, target])?;
        let (id, rev) = match existing {
            Some(f) if f.status != FriendStatus::Rejected => {
                return Err(ApiError::new(
                    ErrorCode::ALREADY_EXISTS,
                    "a friend request between these accounts already exists",
                ));
            }
            Some(f) => (f.id, f.rev),
            None => (self.state.next_friendship_id(self.config.shard), 0),
        };
        let row = FriendshipRow {
            id,
            requester: user.clone(),
            addressee: target.clone(),
            status: FriendStatus::Pending,
            conversation_id: None,
            created_at: now,
            rev: rev + 1,
        };
        self.write_friendship(now, &row, announce.map(|a| (target, a)));
        let response = HttpResponse::json(
            200,
            &FriendRequestResponse {
                friendship_id: id,
                status: FriendStatus::Pending,
            },
        );
        Ok((response, row))
    }

    /// F3 (`PUT /friends/{id}/accept`).
    pub(crate) fn http_friend_accept_path(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = FriendshipId::parse(id).map_err(|_| not_found())?;
        self.accept_or_forward(now, &user, id)
    }

    /// F3, iOS form (`POST /friends/accept {friendship_id}`).
    pub(crate) fn http_friend_accept_body(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: AcceptFriendBody = decode_body(&req.body)?;
        self.accept_or_forward(now, &user, body.friendship_id)
    }

    /// F3 at `user`'s shard: decided here, or forwarded to the pair's owner shard.
    fn accept_or_forward(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        id: FriendshipId,
    ) -> Result<HttpResponse, ApiError> {
        let other = match self.other_member(user, id) {
            Err(e) if e.code == ErrorCode::FRIENDSHIP_NOT_FOUND => {
                let Some(owner) = self.minted_elsewhere(id) else {
                    return Err(e);
                };
                let from = self.alias_of(user)?;
                let op = PairOp::Accept {
                    id,
                    other: None,
                    from,
                };
                return self.forward(owner, user, op);
            }
            other => other?,
        };
        // The caller's alias (for the frame), read before anything changes.
        let me = self.alias_of(user)?;
        if let Some(owner) = self.pair_elsewhere(user, &other) {
            let op = PairOp::Accept {
                id,
                other: Some(other),
                from: me,
            };
            return self.forward(owner, user, op);
        }
        self.accept(now, user, &other, id, me).map(|(r, _)| r)
    }

    /// The shard that gave friendship id `id` when it is another (each shard of a map gives the
    /// ids `≡ shard + 1 (mod shards)`): the pair's owner, which holds a friendship before the
    /// notice that brings its copy to the other member's shard has come. A caller's shard that
    /// does not hold `id` asks there.
    fn minted_elsewhere(&self, id: FriendshipId) -> Option<ShardId> {
        let place = self.config.shard;
        let minted = crate::state::State::friendship_giver(id, place.map());
        (place.map().shards() > 1 && minted != place.me()).then_some(minted)
    }

    /// The other member of friendship `id` as its record says (at the pair's owner shard, for
    /// a caller whose shard did not hold it yet); `FRIENDSHIP_NOT_FOUND` when there is no
    /// such record or `user` is not one of its members.
    pub(crate) fn member_of_record(
        &mut self,
        user: &UserUuid,
        id: FriendshipId,
    ) -> Result<UserUuid, ApiError> {
        let key = format!("{:020}", id.get());
        let (_, cx) = self.read_parts();
        let row = cx
            .reader()
            .get(Table::Friendships, &key)?
            .ok_or_else(not_found)?;
        let f: FriendshipRow = crate::rows::decode(Table::Friendships, &key, &row)?;
        match (f.requester == *user, f.addressee == *user) {
            (true, _) => Ok(f.addressee),
            (_, true) => Ok(f.requester),
            _ => Err(not_found()),
        }
    }

    /// The other member of `user`'s friendship `id` (`FRIENDSHIP_NOT_FOUND` when `user` has no
    /// such friendship).
    fn other_member(&mut self, user: &UserUuid, id: FriendshipId) -> Result<UserUuid, ApiError> {
        let f = self
            .with_contacts(user, |c| c.by_id(id).cloned())?
            .ok_or_else(not_found)?;
        Ok(if f.requester == *user {
            f.addressee
        } else {
            f.requester
        })
    }

    /// The friendship `id` of `user` and `other` as its pair's owner shard (this one) holds
    /// it, read from the lower member's contacts (this shard's), with the contacts of every
    /// member of this shard read too (a change writes them). `FRIENDSHIP_NOT_FOUND` when the
    /// friendship is not theirs.
    fn friendship_of(
        &mut self,
        user: &UserUuid,
        other: &UserUuid,
        id: FriendshipId,
    ) -> Result<FriendshipRow, ApiError> {
        let f = self
            .with_contacts(user.min(other), |c| c.by_id(id).cloned())?
            .filter(|f| {
                [&f.requester, &f.addressee] == [user, other]
                    || [&f.requester, &f.addressee] == [other, user]
            })
            .ok_or_else(not_found)?;
        self.read_local_contacts([user, other])?;
        Ok(f)
    }

    /// Reads the contacts of those of `members` who are this shard's users (a friendship's
    /// change writes their lists).
    fn read_local_contacts(&mut self, members: [&UserUuid; 2]) -> Result<(), ApiError> {
        for m in members {
            if self.config.shard.elsewhere(m).is_none() {
                self.with_contacts(m, |_| ())?;
            }
        }
        Ok(())
    }

    /// F3 at the pair's owner shard (this one): `user` accepts friendship `id` with `other`;
    /// `me` is `user`'s alias, for the `friend_accepted` frame.
    pub(crate) fn accept(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        other: &UserUuid,
        id: FriendshipId,
        me: Option<wire::AliasId>,
    ) -> Result<(HttpResponse, FriendshipRow), ApiError> {
        let f = self.friendship_of(user, other, id)?;
        if f.status == FriendStatus::Accepted
            && let Some(conv) = f.conversation_id.clone()
        {
            return Ok((accepted(conv), f));
        }
        // PLANTED BUG (FriendAcceptByRequester): either party may accept, so a request is
        // accepted by the one who sent it.
        if f.addressee != *user && !planted!(self.config, FriendAcceptByRequester) {
            return Err(ApiError::new(
                ErrorCode::FORBIDDEN,
                "only the recipient of a friend request can accept it",
            ));
        }
        if f.status != FriendStatus::Pending {
            return Err(ApiError::new(
                ErrorCode::INVALID_STATE,
                "the friend request is not pending",
            ));
        }
        let conv = self.fresh_conv_id()?;
        self.state.put_conversation(ConversationRow {
            id: conv.clone(),
            members: [f.requester.clone(), f.addressee.clone()],
            last_seq: Seq(0),
            last_authored: [Seq(0), Seq(0)],
            handed: [Seq(0), Seq(0)],
        });
        let requester = f.requester.clone();
        let row = FriendshipRow {
            status: FriendStatus::Accepted,
            conversation_id: Some(conv.clone()),
            rev: f.rev + 1,
            ..f
        };
        let announce = me.map(|from| (&requester, Announce::Accepted { from }));
        self.write_friendship(now, &row, announce);
        Ok((accepted(conv), row))
    }
    /// The shard that decides the friendship of `a` and `b` when it is another: the lower
    /// member's, which owns the conversation an accept creates. One owner per pair keeps
    /// "one friendship per pair" without a lock.
    pub(crate) fn pair_elsewhere(&self, a: &UserUuid, b: &UserUuid) -> Option<ShardId> {
        self.config.shard.elsewhere(a.min(b))
    }

    /// Writes friendship `f` at its pair's owner shard (this one): its record and its rows in
    /// the contacts of this shard's members, and a notice with the row for a member of another
    /// shard. `announce` is the frame for one member: sent now if that member is connected
    /// here, else with the notice, when that member's shard applies it.
    pub(crate) fn write_friendship(
        &mut self,
        now: UnixMs,
        f: &FriendshipRow,
        announce: Option<(&UserUuid, Announce)>,
    ) {
        self.state.put_friendship(f, self.config.shard);
        let (to_whom, announce) = announce.unzip();
        let mut announce = announce;
        for member in [&f.requester, &f.addressee] {
            let mine = if to_whom == Some(member) {
                announce.take()
            } else {
                None
            };
            if let Some(to) = self.config.shard.elsewhere(member) {
                let notice = Notice::Contact {
                    user: member.clone(),
                    row: f.clone().into(),
                    announce: mine,
                };
                self.send_notice(now, to, notice);
            } else if let (Some(frame), Some(conn)) =
                (mine.and_then(|a| announce_frame(a, f)), self.online(member))
            {
                self.send(conn, frame);
            }
        }
    }

    /// A friendship its pair's owner shard wrote, for `user`'s contacts here: written unless
    /// `user`'s list has that revision or a newer one, and then `announce`d to `user` if
    /// connected. `false`: the list could not be read (nothing changed; it comes again).
    pub(crate) fn take_contact(
        &mut self,
        user: &UserUuid,
        f: &FriendshipRow,
        announce: Option<Announce>,
    ) -> bool {
        let Ok(held) = self.with_contacts(user, |c| c.by_id(f.id).map(|h| h.rev)) else {
            return false;
        };
        if held.is_some_and(|rev| rev >= f.rev) {
            return true;
        }
        self.state.put_contact(user, f);
        if let (Some(frame), Some(conn)) = (
            announce.and_then(|a| announce_frame(a, f)),
            self.online(user),
        ) {
            self.send(conn, frame);
        }
        true
    }

    /// A conversation id no conversation has (96 random bits, checked against the store).
    fn fresh_conv_id(&mut self) -> Result<wire::ConvId, ApiError> {
        loop {
            let Ok(c) = wire::ConvId::parse(&self.ids.conv_id()) else {
                continue;
            };
            let (state, cx) = self.read_parts();
            if state.with_conversation(cx, &c, |_| ())?.is_none() {
                return Ok(c);
            }
        }
    }

    /// F4: the addressee declines; the requester is not notified.
    pub(crate) fn http_friend_reject(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: &str,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let id = FriendshipId::parse(id).map_err(|_| not_found())?;
        let other = match self.other_member(&user, id) {
            Err(e) if e.code == ErrorCode::FRIENDSHIP_NOT_FOUND => {
                let Some(owner) = self.minted_elsewhere(id) else {
                    return Err(e);
                };
                return self.forward(owner, &user, PairOp::Reject { id, other: None });
            }
            other => other?,
        };
        if let Some(owner) = self.pair_elsewhere(&user, &other) {
            let op = PairOp::Reject {
                id,
                other: Some(other),
            };
            return self.forward(owner, &user, op);
        }
        self.reject(now, &user, &other, id).map(|(r, _)| r)
    }

    /// F4 at the pair's owner shard (this one).
    pub(crate) fn reject(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        other: &UserUuid,
        id: FriendshipId,
    ) -> Result<(HttpResponse, FriendshipRow), ApiError> {
        let f = self.friendship_of(user, other, id)?;
        if f.addressee != *user {
            return Err(not_found());
        }
        let row = match f.status {
            FriendStatus::Rejected => f,
            FriendStatus::Accepted => {
                return Err(ApiError::new(
                    ErrorCode::INVALID_STATE,
                    "the friendship is already accepted",
                ));
            }
            FriendStatus::Pending => {
                let row = FriendshipRow {
                    status: FriendStatus::Rejected,
                    rev: f.rev + 1,
                    ..f
                };
                self.write_friendship(now, &row, None);
                row
            }
        };
        Ok((HttpResponse::json(200, &OkResponse::OK), row))
    }
}

/// The frame `a` announces about friendship `f` (`friend_accepted` names the conversation
/// its accept created: none before).
fn announce_frame(a: Announce, f: &FriendshipRow) -> Option<ServerFrame> {
    Some(match a {
        Announce::Request { from, nickname } => ServerFrame::FriendRequest(FriendRequestFrame {
            friendship_id: f.id,
            from,
            nickname,
        }),
        Announce::Accepted { from } => ServerFrame::FriendAccepted(FriendAcceptedFrame {
            friendship_id: f.id,
            from,
            conversation_id: f.conversation_id.clone()?,
        }),
    })
}

/// The answer of an accept: the conversation.
fn accepted(conv: wire::ConvId) -> HttpResponse {
    HttpResponse::json(
        200,
        &AcceptFriendResponse {
            conversation_id: conv,
        },
    )
}
