//! Sans-IO SecureChat client core: keys, crypto compatible with the reference web client, the
//! trust guard, local stores and the connection/outbox machine.
//!
//! No clocks, sockets, threads or global RNG: time enters as `now` (epoch ms), randomness from a
//! seeded [`rand_chacha::ChaCha20Rng`] or an injected [`rand_core::CryptoRng`].
//!
//! A shell drives [`machine::Client`] like this:
//!
//! ```text
//! loop {
//!     // 1. feed one input: a user command, an HTTP response, a frame, a socket event, a timeout
//!     client.handle_text(now, &text)?;
//!     // 2. drain every output, in this order
//!     while let Some(req) = client.poll_http()       { /* perform, then handle_http_response */ }
//!     while let Some(cmd) = client.poll_connection() { /* open / close the socket */ }
//!     while let Some(f)   = client.poll_transmit()   { /* socket.send(f.encode()) */ }
//!     while let Some(ev)  = client.poll_event()      { /* hand to the app */ }
//!     // 3. sleep until client.poll_timeout(), then client.handle_timeout(now)
//! }
//! ```
//!
//! Modules: [`keys`] (mnemonic, SLIP-0010 identity, security code), [`encoding`] (strict base64
//! and hex), [`pow`] (registration proof of work), [`crypto`] (session key, payloads, content
//! shapes, media chunks, call frames, signed call signals), [`security`] (trust table),
//! [`store`] (records, trait, memory and SQLite backends), [`machine`] (the client machine).
//! Each module doc lists the decisions it takes and where it differs from the reference clients.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod crypto;
pub mod encoding;
pub mod keys;
pub mod machine;
pub mod pow;
pub mod security;
pub mod store;
