//! The wire transcript of one case: every HTTP exchange and WebSocket frame, secrets redacted.
//!
//! Redaction happens when an entry is recorded: JSON values under the keys `token`, `ticket`,
//! `signature`, `mnemonic` and `_sig`, `Authorization` headers, `token=`/`ticket=` query values,
//! and any string registered with [`Transcript::secret`] (mnemonics, tokens, tickets) anywhere in
//! the text.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;

const REDACTED_KEYS: &[&str] = &["token", "ticket", "signature", "mnemonic", "_sig"];
const REDACTED: &str = "<redacted>";
/// Longest body text kept per entry, in bytes.
const MAX_ENTRY_TEXT_BYTES: usize = 4096;

/// Who produced an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The suite sent it.
    Out,
    /// The relay sent it.
    In,
    /// A note of the suite (what it is about to check).
    Note,
}

/// One transcript line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Direction.
    pub dir: Direction,
    /// Channel: `http` or `ws:<label>`.
    pub channel: String,
    /// The redacted text.
    pub text: String,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Vec<Entry>,
    secrets: Vec<String>,
}

/// A shared recorder (cloned into every WebSocket of the case).
#[derive(Debug, Clone, Default)]
pub struct Transcript(Arc<Mutex<Inner>>);

impl Transcript {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a secret: every later occurrence in recorded text is redacted.
    pub fn secret(&self, secret: &str) {
        if secret.len() >= 8 {
            self.lock().secrets.push(secret.to_owned());
        }
    }

    /// Records one entry.
    pub fn record(&self, dir: Direction, channel: &str, text: &str) {
        let mut inner = self.lock();
        let mut text = redact_text(text, &inner.secrets);
        if text.len() > MAX_ENTRY_TEXT_BYTES {
            let mut cut = MAX_ENTRY_TEXT_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("…(truncated)");
        }
        inner.entries.push(Entry {
            dir,
            channel: channel.to_owned(),
            text,
        });
    }

    /// A note of what the suite checks next.
    pub fn note(&self, text: &str) {
        self.record(Direction::Note, "note", text);
    }

    /// Everything recorded so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().entries.clone()
    }
}

fn redact_value(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if REDACTED_KEYS.contains(&k.as_str()) && !val.is_null() {
                    *val = Value::from(REDACTED);
                } else {
                    redact_value(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        _ => {}
    }
}

fn redact_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = ["token=", "ticket="]
        .iter()
        .filter_map(|k| rest.find(k).map(|p| (p, k.len())))
        .min()
    {
        let (p, len) = pos;
        out.push_str(&rest[..p + len]);
        out.push_str(REDACTED);
        rest = &rest[p + len..];
        let end = rest
            .find(|c: char| c == '&' || c.is_whitespace())
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Redacts one piece of text (JSON keys, query values, registered secrets).
pub fn redact_text(text: &str, secrets: &[String]) -> String {
    let mut text = match serde_json::from_str::<Value>(text) {
        Ok(mut v) if v.is_object() || v.is_array() => {
            redact_value(&mut v);
            v.to_string()
        }
        _ => text.to_owned(),
    };
    // A request line + JSON body, as the context records them: redact the body part too.
    if let Some(pos) = text.find(" {")
        && let Ok(mut v) = serde_json::from_str::<Value>(&text[pos + 1..])
    {
        redact_value(&mut v);
        text = format!("{} {v}", &text[..pos]);
    }
    text = redact_query(&text);
    for s in secrets {
        if text.contains(s.as_str()) {
            text = text.replace(s.as_str(), REDACTED);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_keys_queries_and_registered_secrets() {
        let t = Transcript::default();
        t.secret("abandon abandon about");
        t.record(
            Direction::Out,
            "http",
            r#"POST /api/v1/auth/verify {"signature":"c2ln","user_uuid":"u"}"#,
        );
        t.record(Direction::Out, "ws", "GET /ws?user_uuid=u&ticket=abc&x=1");
        t.record(Direction::In, "http", r#"{"token":"eyJ","expires_in":5}"#);
        t.record(Direction::Note, "note", "mnemonic abandon abandon about");
        let e = t.entries();
        assert!(
            e[0].text.contains(r#""signature":"<redacted>""#),
            "{}",
            e[0].text
        );
        assert_eq!(e[1].text, "GET /ws?user_uuid=u&ticket=<redacted>&x=1");
        assert!(!e[2].text.contains("eyJ"));
        assert_eq!(e[3].text, "mnemonic <redacted>");
    }
}
