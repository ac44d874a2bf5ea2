//! Request budgets: which budget each route is charged to ([`BudgetClass`]) and the token
//! buckets of every account and client network ([`Budgets`]; `Config::lookups`,
//! `lookups_per_network`, `friend_requests`, `account_requests`, `public_requests`). The
//! client network is the shell's key of the peer's address (`HttpRequest::remote_addr`: an
//! IPv4 address or an IPv6 /64 by default). Memory only: a restart refills them.

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
    lookups_by_network: TokenBucket<String>,
    friend_requests: TokenBucket<UserUuid>,
    account: TokenBucket<UserUuid>,
    public: TokenBucket<String>,
}

impl Budgets {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            lookups: TokenBucket::budget(config.lookups),
            lookups_by_network: TokenBucket::budget(config.lookups_per_network),
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
        if !bucket.take(now, user) {
            let wait = bucket.retry_after_ms(now, user);
            return Err(ApiError::rate_limited(
                format!("too many {what} from this account; slow down"),
                wait,
            ));
        }
        if class != BudgetClass::Lookup || self.lookups_by_network.take(now, addr) {
            return Ok(());
        }
        let wait = self.lookups_by_network.retry_after_ms(now, addr);
        Err(ApiError::rate_limited(
            "too many user lookups from this network; slow down",
            wait,
        ))
    }

    /// Forgets the buckets that refilled completely.
    pub(crate) fn sweep(&mut self, now: u64) {
        self.lookups.sweep(now);
        self.lookups_by_network.sweep(now);
        self.friend_requests.sweep(now);
        self.account.sweep(now);
        self.public.sweep(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: u8) -> UserUuid {
        UserUuid::parse(&format!("00000000-0000-4000-8000-0000000000{n:02x}")).unwrap()
    }

    /// Accounts made on one network share its lookup budget; another network has its own.
    #[test]
    fn lookups_are_charged_to_the_account_and_to_its_network() {
        let config = Config::default();
        let mut b = Budgets::new(&config);
        let (home, other) = ("2001:db8:1:2::/64".to_owned(), "203.0.113.7/32".to_owned());
        let per_account = config.lookups.burst;
        let per_network = config.lookups_per_network.burst;
        let mut granted = 0;
        for n in 0..10 {
            for _ in 0..per_account {
                if b.charge(0, BudgetClass::Lookup, Some(&user(n)), &home)
                    .is_ok()
                {
                    granted += 1;
                }
            }
        }
        assert_eq!(granted, per_network, "ten accounts, one network");
        let refused = b
            .charge(0, BudgetClass::Lookup, Some(&user(20)), &home)
            .unwrap_err();
        assert_eq!(refused.status, 429);
        assert!(refused.message.contains("network"), "{}", refused.message);
        assert!(
            b.charge(0, BudgetClass::Lookup, Some(&user(21)), &other)
                .is_ok()
        );
        // Other routes of the same accounts are not charged to the network.
        assert!(
            b.charge(0, BudgetClass::Account, Some(&user(0)), &home)
                .is_ok()
        );
    }
}
