//! Tier-1 tests: the relay driven in memory under a virtual clock (no sockets, no sleeps),
//! tier-2 proptest against a naive model, and durability across a simulated crash.

mod durability;
mod http;
mod messaging;
mod model;
mod world;
