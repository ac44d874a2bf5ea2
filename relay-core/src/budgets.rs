//! Request budgets: which budget each route is charged to ([`BudgetClass`]) and the token
//! buckets of every account and client address ([`Budgets`]; `Config::lookups`,
//! `friend_requests`, `account_requests`, `public_requests`). Memory only: a restart refills
//! them.

use wire::UserUuid;

use crate::config::Config;
use crate::http::{ApiError, Route};
use crate::ratelimit::TokenBucket;

/// Which budget a route's requests are charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BudgetClass {
    /// Limited by rules of their own (PoW, registration, auth challenges) or authenticated
    /// otherwise (the signed payment webhook).
    Exempt,
    /// Unauthenticated, charged to the client address (vanity search and reserve, order
    /// status).
    Public,
    /// `GET /users/{alias}`.
    Lookup,
    /// `POST /friends/request`.
    FriendRequest,
    /// Every other authenticated route.
    Account,
}

impl BudgetClass {
    pub(crate) fn of(route: &Route) -> Self {
        match route {
            Route::PowChallenge
            | Route::Register
            | Route::AuthChallenge
            | Route::AuthVerify
            | Route::PaymentWebhook => Self::Exempt,
            Route::VanitySearch | Route::VanityReserve | Route::OrderStatus(_) => Self::Public,
            Route::User(_) => Self::Lookup,
            Route::FriendRequest => Self::FriendRequest,
            _ => Self::Account,
        }
    }
}

/// The request budgets of every account and client address (memory only: a restart refills
/// them).
#[derive(Debug)]
pub(crate) struct Budgets {
    lookups: TokenBucket<UserUuid>,
    friend_requests: TokenBucket<UserUuid>,
    account: TokenBucket<UserUuid>,
    public: TokenBucket<String>,
}

impl Budgets {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            lookups: TokenBucket::budget(config.lookups),
            friend_requests: TokenBucket::budget(config.friend_requests),
            account: TokenBucket::budget(config.account_requests),
            public: TokenBucket::budget(config.public_requests),
        }
    }

    /// Charges one request of `class` at `now`: to the client address `addr` (public routes)
    /// or to `caller` (an authenticated route; a request without a verified caller is not
    /// charged, its handler refuses it). `Err`: 429 `RATE_LIMITED` with the wait until the
    /// budget has a token again.
    pub(crate) fn charge(
        &mut self,
        now: u64,
        class: BudgetClass,
        caller: Option<&UserUuid>,
        addr: &String,
    ) -> Result<(), ApiError> {
        let (bucket, what) = match class {
            BudgetClass::Exempt => return Ok(()),
            BudgetClass::Public => {
                if self.public.take(now, addr) {
                    return Ok(());
                }
                let wait = self.public.retry_after_ms(now, addr);
                return Err(ApiError::rate_limited(
                    "too many requests from this address; slow down",
                    wait,
                ));
            }
            BudgetClass::Lookup => (&mut self.lookups, "user lookups"),
            BudgetClass::FriendRequest => (&mut self.friend_requests, "friend requests"),
            BudgetClass::Account => (&mut self.account, "requests"),
        };
        let Some(user) = caller else {
            return Ok(());
        };
        if bucket.take(now, user) {
            return Ok(());
        }
        let wait = bucket.retry_after_ms(now, user);
        Err(ApiError::rate_limited(
            format!("too many {what} from this account; slow down"),
            wait,
        ))
    }

    /// Forgets the buckets that refilled completely.
    pub(crate) fn sweep(&mut self, now: u64) {
        self.lookups.sweep(now);
        self.friend_requests.sweep(now);
        self.account.sweep(now);
        self.public.sweep(now);
    }
}
