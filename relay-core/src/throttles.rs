//! What an authenticated WebSocket may send per unit of time: the one owner of the relay's
//! frame-level limits (every frame per account, `msg` per account, `typing` per account, call
//! signals per connection). Request budgets of the HTTP routes live in `crate::budgets`, the
//! limits of callers not signed in yet in `crate::admission`.

use wire::{UnixMs, UserUuid};

use crate::config::Config;
use crate::limits::MINUTE_MS;
use crate::ratelimit::{RateLimiter, TokenBucket};
use crate::shell::ConnId;

/// The frame-level limits of one relay (see the module doc).
#[derive(Debug)]
pub(crate) struct Throttles {
    /// Every inbound frame, before decoding, per account (`Config::frames_per_min_per_conn`,
    /// burst `Config::frame_burst_per_conn`).
    frames: TokenBucket<UserUuid>,
    /// New messages per account and minute (`Config::msgs_per_min_per_user`).
    messages: RateLimiter<UserUuid>,
    /// `typing` notices per account and minute (`crate::limits::MAX_TYPING_PER_MIN_PER_USER`).
    typing: RateLimiter<UserUuid>,
    /// Call signals per connection and minute
    /// (`crate::limits::MAX_CALL_FRAMES_PER_MIN_PER_CONN`).
    call_signals: RateLimiter<ConnId>,
}

impl Throttles {
    /// The limits of `config`, the message windows as the store left them (`messages`:
    /// `crate::tombstones::restored_msg_limit`, so a restart hands nobody a fresh allowance).
    pub(crate) fn new(config: &Config, messages: RateLimiter<UserUuid>) -> Self {
        Self {
            frames: TokenBucket::new(config.frames_per_min_per_conn, config.frame_burst_per_conn),
            messages,
            typing: RateLimiter::new(crate::limits::MAX_TYPING_PER_MIN_PER_USER, MINUTE_MS),
            call_signals: RateLimiter::new(
                crate::limits::MAX_CALL_FRAMES_PER_MIN_PER_CONN,
                MINUTE_MS,
            ),
        }
    }

    /// Charges one inbound frame of `user`; `false`: the budget is used up.
    #[inline]
    pub(crate) fn take_frame(&mut self, now: UnixMs, user: &UserUuid) -> bool {
        self.frames.take(now.get(), user)
    }

    /// Gives back the frame just charged (a receipt that released pushed messages is free).
    #[inline]
    pub(crate) fn refund_frame(&mut self, user: &UserUuid) {
        self.frames.refund(user);
    }

    /// Whether `user` may send one more message now (nothing is charged: see
    /// [`charge_message`](Self::charge_message)).
    #[inline]
    pub(crate) fn message_allowed(&self, now: UnixMs, user: &UserUuid) -> bool {
        self.messages.check(now.get(), user)
    }

    /// Counts a message of `user` that was accepted (or submitted to its conversation's
    /// owner, which decides whether it is).
    #[inline]
    pub(crate) fn charge_message(&mut self, now: UnixMs, user: &UserUuid) {
        self.messages.record(now.get(), user);
    }

    /// Gives back a message of `user` charged when it was submitted, which its conversation's
    /// owner refused or found stored already.
    #[inline]
    pub(crate) fn refund_message(&mut self, now: UnixMs, user: &UserUuid) {
        self.messages.unrecord(now.get(), user);
    }

    /// Charges a `typing` notice of `user`; `false`: over the limit (dropped).
    #[inline]
    pub(crate) fn allow_typing(&mut self, now: UnixMs, user: &UserUuid) -> bool {
        self.typing.allow(now.get(), user)
    }

    /// Whether `conn` may send one more call signal now (nothing is charged: see
    /// [`charge_call_signal`](Self::charge_call_signal)).
    #[inline]
    pub(crate) fn call_signal_allowed(&self, now: UnixMs, conn: ConnId) -> bool {
        self.call_signals.check(now.get(), &conn)
    }

    /// Counts a call signal of `conn` that was judged (passed on or refused by its rule).
    #[inline]
    pub(crate) fn charge_call_signal(&mut self, now: UnixMs, conn: ConnId) {
        self.call_signals.record(now.get(), &conn);
    }

    /// Forgets the windows and buckets that ended before `now` (memory only: the answers stay
    /// the same).
    pub(crate) fn sweep(&mut self, now: UnixMs) {
        self.frames.sweep(now.get());
        self.messages.sweep(now.get());
        self.typing.sweep(now.get());
        self.call_signals.sweep(now.get());
    }
}
