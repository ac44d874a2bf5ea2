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
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::planted::planted;
use crate::rows::{ConversationRow, FriendshipRow};

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
        // Both lists are written with the friendship: both are read first.
        let existing = self.with_contacts(&user, |c| c.with(&target).cloned())?;
        self.with_contacts(&target, |_| ())?;
        let id = match existing {
            Some(f) if f.status != FriendStatus::Rejected => {
                return Err(ApiError::new(
                    ErrorCode::ALREADY_EXISTS,
                    "a friend request between these accounts already exists",
                ));
            }
            Some(f) => f.id,
            None => self.state.next_friendship_id(self.config.shard),
        };
        self.state.put_friendship(&FriendshipRow {
            id,
            requester: user.clone(),
            addressee: target.clone(),
            status: FriendStatus::Pending,
            conversation_id: None,
            created_at: now,
        });
        if let (Some(conn), Some(me)) = (self.online(&target), me) {
            let frame = ServerFrame::FriendRequest(FriendRequestFrame {
                friendship_id: id,
                from: me.alias_id.clone(),
                nickname: me.nickname.clone(),
            });
            self.send(conn, frame);
        }
        Ok(HttpResponse::json(
            200,
            &FriendRequestResponse {
                friendship_id: id,
                status: FriendStatus::Pending,
            },
        ))
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
        self.accept(now, &user, id)
    }

    /// F3, iOS form (`POST /friends/accept {friendship_id}`).
    pub(crate) fn http_friend_accept_body(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let (user, _) = self.authenticate(now, req)?;
        let body: AcceptFriendBody = decode_body(&req.body)?;
        self.accept(now, &user, body.friendship_id)
    }

    /// The friendship `id` of `user` (`FRIENDSHIP_NOT_FOUND` when `user` is not in it) with
    /// the other member's contacts read too (a change writes both lists).
    fn friendship_of(
        &mut self,
        user: &UserUuid,
        id: FriendshipId,
    ) -> Result<FriendshipRow, ApiError> {
        let f = self
            .with_contacts(user, |c| c.by_id(id).cloned())?
            .ok_or_else(not_found)?;
        let other = if f.requester == *user {
            &f.addressee
        } else {
            &f.requester
        };
        self.with_contacts(other, |_| ())?;
        Ok(f)
    }

    fn accept(
        &mut self,
        now: UnixMs,
        user: &UserUuid,
        id: FriendshipId,
    ) -> Result<HttpResponse, ApiError> {
        let f = self.friendship_of(user, id)?;
        if f.status == FriendStatus::Accepted
            && let Some(conv) = f.conversation_id
        {
            return Ok(HttpResponse::json(
                200,
                &AcceptFriendResponse {
                    conversation_id: conv,
                },
            ));
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
        // The caller's alias (for the frame), read before anything changes.
        let me = self.alias_of(user)?;
        let conv = self.fresh_conv_id()?;
        self.state.put_conversation(ConversationRow {
            id: conv.clone(),
            members: [f.requester.clone(), f.addressee.clone()],
            last_seq: Seq(0),
            last_authored: [Seq(0), Seq(0)],
            handed: [Seq(0), Seq(0)],
        });
        let requester = f.requester.clone();
        self.state.put_friendship(&FriendshipRow {
            status: FriendStatus::Accepted,
            conversation_id: Some(conv.clone()),
            ..f
        });
        let _ = now;
        if let (Some(conn), Some(me)) = (self.online(&requester), me) {
            self.send(
                conn,
                ServerFrame::FriendAccepted(FriendAcceptedFrame {
                    friendship_id: id,
                    from: me,
                    conversation_id: conv.clone(),
                }),
            );
        }
        Ok(HttpResponse::json(
            200,
            &AcceptFriendResponse {
                conversation_id: conv,
            },
        ))
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
        let f = self.friendship_of(&user, id)?;
        if f.addressee != user {
            return Err(not_found());
        }
        match f.status {
            FriendStatus::Rejected => {}
            FriendStatus::Accepted => {
                return Err(ApiError::new(
                    ErrorCode::INVALID_STATE,
                    "the friendship is already accepted",
                ));
            }
            FriendStatus::Pending => self.state.put_friendship(&FriendshipRow {
                status: FriendStatus::Rejected,
                ..f
            }),
        }
        Ok(HttpResponse::json(200, &OkResponse::OK))
    }
}
