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
        // Refused for the network: the account's own budget keeps its token.
        self.lookups.refund(user);
        let wait = self.lookups_by_network.retry_after_ms(now, addr);
        Err(ApiError::rate_limited(
            "too many user lookups from this network; slow down",
            wait,
        ))
    }

    /// Gives back the token [`Budgets::charge`] took for one request of `class` from `caller`
    /// at `addr`: the relay refused the request unserved, for a reason of its own.
    pub(crate) fn refund(&mut self, class: BudgetClass, caller: Option<&UserUuid>, addr: &String) {
        let bucket = match class {
            BudgetClass::Exempt => return,
            BudgetClass::Public => return self.public.refund(addr),
            BudgetClass::Lookup => {
                self.lookups_by_network.refund(addr);
                &mut self.lookups
            }
            BudgetClass::FriendRequest => &mut self.friend_requests,
            BudgetClass::Account => &mut self.account,
        };
        if let Some(user) = caller {
            bucket.refund(user);
        }
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

    /// How many lookups `who` is granted at `addr` at time 0, until the first refusal.
    fn lookups_granted(b: &mut Budgets, who: &UserUuid, addr: &String) -> usize {
        (0..1_000)
            .take_while(|_| b.charge(0, BudgetClass::Lookup, Some(who), addr).is_ok())
            .count()
    }

    /// A lookup refused for its network's budget leaves the account's own token in place:
    /// once its network has room again (here: on another network), the account has its whole
    /// burst.
    #[test]
    fn a_lookup_refused_for_the_network_keeps_the_accounts_token() {
        let config = Config::default();
        let mut b = Budgets::new(&config);
        let home = "198.51.100.0/24".to_owned();
        let per_network = config.lookups_per_network.burst;
        let per_account = config.lookups.burst;
        for n in 0..(per_network / per_account) {
            let _ = lookups_granted(&mut b, &user(n as u8), &home);
        }
        let late = user(99);
        for _ in 0..5 {
            assert!(
                b.charge(0, BudgetClass::Lookup, Some(&late), &home)
                    .is_err()
            );
        }
        let elsewhere = "203.0.113.9/32".to_owned();
        assert_eq!(
            lookups_granted(&mut b, &late, &elsewhere),
            per_account as usize
        );
    }

    /// A refund gives back exactly the token of the class charged: the account's (and its
    /// network's, for a lookup), or the address's for a public route.
    #[test]
    fn a_refund_gives_back_the_token_charged() {
        let config = Config::default();
        let mut b = Budgets::new(&config);
        let addr = "192.0.2.1/32".to_owned();
        let per_account = lookups_granted(&mut b, &user(1), &addr);
        b.refund(BudgetClass::Lookup, Some(&user(1)), &addr);
        assert_eq!(lookups_granted(&mut b, &user(1), &addr), 1);
        // A refund of another class leaves the lookups empty.
        b.refund(BudgetClass::Account, Some(&user(1)), &addr);
        b.refund(BudgetClass::Public, None, &addr);
        assert_eq!(lookups_granted(&mut b, &user(1), &addr), 0);
        assert!(per_account > 0);
        let publics = (0..10_000)
            .take_while(|_| b.charge(0, BudgetClass::Public, None, &addr).is_ok())
            .count();
        b.refund(BudgetClass::Public, None, &addr);
        assert!(b.charge(0, BudgetClass::Public, None, &addr).is_ok());
        assert!(b.charge(0, BudgetClass::Public, None, &addr).is_err());
        assert!(publics > 0);
    }
}
