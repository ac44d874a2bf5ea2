//! The relay's log subscriber: the operator's filter, with the libraries that would print
//! frames or bodies capped at INFO whatever it asks.
//!
//! Our own events never carry payloads, tokens, tickets or client addresses at any level (frame
//! events name the type and size only; `relay_core::HttpRequest`'s `Debug` redacts the body,
//! headers and address). The WebSocket and HTTP libraries do not follow that rule: at TRACE,
//! tungstenite prints every frame it reads or writes with its payload. So a `--log trace` could
//! leak what the relay must never write down; [`PAYLOAD_BEARING_TARGETS`] below INFO are
//! dropped before the operator's filter is even asked.
//!
//! Two formats ([`LogFormat`]): text lines for people (ANSI colours only on a terminal without
//! `NO_COLOR`), or one JSON object per line for log pipelines, with stable field names:
//! `timestamp` (RFC 3339, UTC), `level` (`ERROR` … `TRACE`), `target` (the module),
//! `message`, every field of the event by its name (`conn`, `kind`, `status`, …), and `span`
//! (the current span's `name` and fields, e.g. `{"name":"ws","conn":3,"user":"…"}`) when there
//! is one. The same filter and the same cap apply to both.

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterFn, ParseError};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer, Registry};

/// Log targets (crates) whose DEBUG and TRACE events may contain frame payloads, bodies or
/// peer addresses; they never log below INFO in the relay.
pub const PAYLOAD_BEARING_TARGETS: &[&str] = &[
    "tungstenite",
    "tokio_tungstenite",
    "hyper",
    "hyper_util",
    "h2",
    "axum",
    "tower",
    "tower_http",
];

/// Whether an event or span may be recorded at all: everything at INFO and above, and below
/// INFO only outside [`PAYLOAD_BEARING_TARGETS`].
pub fn allowed(meta: &Metadata<'_>) -> bool {
    if *meta.level() <= Level::INFO {
        return true;
    }
    let target = meta.target();
    !PAYLOAD_BEARING_TARGETS.iter().any(|t| {
        target == *t
            || target
                .strip_prefix(t)
                .is_some_and(|rest| rest.starts_with("::"))
    })
}

/// Whether log lines may carry ANSI colour codes: only on a terminal, and never when the
/// `NO_COLOR` environment variable is set to anything but the empty string
/// (<https://no-color.org>).
pub fn use_color(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// [`use_color`] for the process's standard output.
pub fn stdout_color() -> bool {
    use std::io::IsTerminal as _;
    use_color(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours when `color` ([`stdout_color`] for standard output).
    Text {
        /// Colour the level and fields.
        color: bool,
    },
    /// One JSON object per line (module doc: the field names), never coloured.
    Json,
}

/// A subscriber writing text lines to `writer`, filtered by `directives` (tracing's
/// `EnvFilter` syntax, e.g. `info` or `relay_core=debug,info`) and by [`allowed`]; with ANSI
/// colours only when `color` ([`stdout_color`] for standard output).
pub fn subscriber<W>(
    directives: &str,
    writer: W,
    color: bool,
) -> Result<impl Subscriber + Send + Sync, ParseError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    subscriber_with_format(directives, writer, LogFormat::Text { color })
}

/// [`subscriber`] in the given format.
pub fn subscriber_with_format<W>(
    directives: &str,
    writer: W,
    format: LogFormat,
) -> Result<impl Subscriber + Send + Sync, ParseError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(directives)?;
    // The directives' most verbose level, passed on: without it the `FilterFn` (no hint of
    // its own) made the whole subscriber's hint TRACE, so the `log` crate's max level was
    // TRACE and every `log::trace!` of tungstenite built a record and went through both
    // filters (~3 % of the relay's CPU under load, measured with perf).
    let allowed_fn = match filter.max_level_hint() {
        Some(hint) => FilterFn::new(allowed).with_max_level_hint(hint),
        None => FilterFn::new(allowed),
    };
    let layer: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text { color } => tracing_subscriber::fmt::layer()
            .with_ansi(color)
            .with_writer(writer)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_ansi(false)
            .with_writer(writer)
            .boxed(),
    };
    Ok(Registry::default().with(layer.with_filter(filter).with_filter(allowed_fn)))
}

#[cfg(test)]
mod tests {
    use super::allowed;
    use tracing::Level;

    fn meta_allowed(target: &'static str, level: Level) -> bool {
        struct Cs;
        impl tracing::callsite::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &tracing::Metadata<'_> {
                unreachable!("not registered")
            }
        }
        static CS: Cs = Cs;
        let meta = tracing::Metadata::new(
            "event",
            target,
            level,
            None,
            None,
            None,
            tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CS)),
            tracing::metadata::Kind::EVENT,
        );
        allowed(&meta)
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use super::use_color;
        use std::ffi::OsStr;
        assert!(use_color(true, None));
        assert!(
            use_color(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!use_color(true, Some(OsStr::new("1"))));
        assert!(!use_color(false, None), "piped: no colour");
    }

    #[test]
    fn payload_bearing_crates_are_capped_at_info() {
        assert!(!meta_allowed("tungstenite::protocol", Level::TRACE));
        assert!(!meta_allowed("tokio_tungstenite", Level::DEBUG));
        assert!(!meta_allowed("hyper::proto::h1::io", Level::TRACE));
        assert!(meta_allowed("hyper", Level::INFO));
        assert!(meta_allowed("tungstenite", Level::WARN));
        // Only whole crate names: `hyperion` or our own crates are not capped.
        assert!(meta_allowed("hyperion", Level::TRACE));
        assert!(meta_allowed("relay_server::ws", Level::TRACE));
        assert!(meta_allowed("relay_core::relay", Level::TRACE));
    }
}
