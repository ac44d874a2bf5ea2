//! **Code probes**: named marks at the places a test campaign must reach — every refusal, every
//! state transition of orders, holds, bindings, subscriptions, tickets and the sync window,
//! and the rare interleavings worth naming (FoundationDB's `CODE_PROBE`, TigerBeetle's
//! coverage marks). The simulator counts, per run, how often each probe was hit, and a sweep
//! reports the probes it never reached: a path no simulated client takes shows up as a missed
//! probe instead of hiding behind green seeds.
//!
//! ```
//! probes::probe!("order:paid");
//! ```
//!
//! * **Zero cost when off.** Without the `enabled` feature [`probe!`] expands to nothing and
//!   [`refusal`] is an empty inline function; a relay built for users
//!   (`cargo build -p relay-server --bin relay`) has neither counters nor branches.
//! * **Per run, per thread.** Hits go to a thread-local recorder that exists only between
//!   [`start`] and [`finish`]: the simulator runs a whole world (relays, clients, stores) on
//!   one thread, several seeds on several threads, so runs never mix. A hit on a thread with no
//!   recorder (unit tests, other threads) is dropped.
//! * **Names.** `area:what` for explicit probes (`order:paid`, `sync:window-full`); refusals are
//!   named `refuse:CODE@file` from the error code and the source file (its stem) that built the
//!   refusal, by `#[track_caller]`, so one code refused from two modules is two probes. Names
//!   never carry ids, aliases or anything a user sent.

#[cfg(feature = "enabled")]
mod recorder {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    thread_local! {
        static HITS: RefCell<Option<BTreeMap<String, u64>>> = const { RefCell::new(None) };
    }

    pub(crate) fn start() {
        HITS.with(|h| *h.borrow_mut() = Some(BTreeMap::new()));
    }

    pub(crate) fn finish() -> BTreeMap<String, u64> {
        HITS.with(|h| h.borrow_mut().take()).unwrap_or_default()
    }

    pub(crate) fn hit(name: &str) {
        HITS.with(|h| {
            if let Some(map) = h.borrow_mut().as_mut() {
                match map.get_mut(name) {
                    Some(n) => *n += 1,
                    None => {
                        map.insert(name.to_owned(), 1);
                    }
                }
            }
        });
    }
}

/// Whether probes are compiled in (the `enabled` feature).
pub const ENABLED: bool = cfg!(feature = "enabled");

/// Starts counting probe hits on this thread (replacing any earlier recorder).
pub fn start() {
    #[cfg(feature = "enabled")]
    recorder::start();
}

/// Stops counting on this thread and returns each probe hit since [`start`] with its count
/// (empty without the feature or without a recorder).
pub fn finish() -> std::collections::BTreeMap<String, u64> {
    #[cfg(feature = "enabled")]
    return recorder::finish();
    #[cfg(not(feature = "enabled"))]
    std::collections::BTreeMap::new()
}

/// Records one hit of `name` (what [`probe!`] calls; use the macro).
#[doc(hidden)]
#[cfg(feature = "enabled")]
pub fn hit(name: &str) {
    recorder::hit(name);
}

/// Records a refusal with error code `code`, named after the source file that made it
/// (`refuse:CODE@file`). Callers that build refusals for their own callers carry
/// `#[track_caller]` too, so the file is where the refusal was decided.
#[cfg(feature = "enabled")]
#[track_caller]
pub fn refusal(code: &str) {
    let file = std::panic::Location::caller().file();
    recorder::hit(&refusal_name(code, file));
}

/// Records a refusal (compiled away: the `enabled` feature is off).
#[cfg(not(feature = "enabled"))]
#[inline(always)]
pub fn refusal(_code: &str) {}

/// The probe name of a refusal with `code` decided in source file `file`:
/// `refuse:CODE@stem` (`relay-core/src/vanity.rs` → `refuse:ORDER_NOT_FOUND@vanity`).
pub fn refusal_name(code: &str, file: &str) -> String {
    format!("refuse:{code}@{}", module_name(file))
}

/// The module a source file holds: its stem, or for a `mod.rs` its directory's name
/// (`relay-core/src/relay/mod.rs` is `relay`).
#[must_use]
pub fn module_name(file: &str) -> &str {
    let mut parts = file.rsplit(['/', '\\']);
    let stem = parts.next().unwrap_or(file).trim_end_matches(".rs");
    if stem == "mod" {
        parts.next().unwrap_or(stem)
    } else {
        stem
    }
}

/// Marks a probe: `probe!("order:paid")`. The name is a string literal (`area:what`); it is
/// counted when the `enabled` feature is on and a recorder runs on this thread, and compiles
/// to nothing otherwise.
#[cfg(feature = "enabled")]
#[macro_export]
macro_rules! probe {
    ($name:literal) => {
        $crate::hit($name)
    };
}

/// Marks a probe: `probe!("order:paid")` (compiled away: the `enabled` feature is off).
#[cfg(not(feature = "enabled"))]
#[macro_export]
macro_rules! probe {
    ($name:literal) => {
        ()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_carry_the_file_stem() {
        assert_eq!(
            refusal_name("ORDER_NOT_FOUND", "relay-core/src/vanity.rs"),
            "refuse:ORDER_NOT_FOUND@vanity"
        );
        assert_eq!(refusal_name("X", r"a\b\c.rs"), "refuse:X@c");
        assert_eq!(
            refusal_name("BAD_FRAME", "relay-core/src/relay/mod.rs"),
            "refuse:BAD_FRAME@relay"
        );
    }

    #[cfg(feature = "enabled")]
    #[test]
    fn hits_are_counted_between_start_and_finish_only() {
        probe!("before:start");
        start();
        probe!("a:b");
        probe!("a:b");
        refusal("NOPE");
        let hits = finish();
        probe!("after:finish");
        assert_eq!(hits.get("a:b"), Some(&2));
        assert_eq!(hits.get("refuse:NOPE@lib"), Some(&1));
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert!(finish().is_empty());
    }

    #[cfg(feature = "enabled")]
    #[test]
    fn threads_do_not_mix() {
        start();
        probe!("main:one");
        let other = std::thread::spawn(|| {
            start();
            probe!("other:one");
            finish()
        })
        .join()
        .expect("thread");
        let mine = finish();
        assert_eq!(other.keys().collect::<Vec<_>>(), ["other:one"]);
        assert_eq!(mine.keys().collect::<Vec<_>>(), ["main:one"]);
    }
}
