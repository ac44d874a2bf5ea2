//! Plaintext content shapes inside an encrypted payload (PROTOCOL §4.4).
//!
//! Sending uses the spec's forms: plain text, the reply wrapper `{"text","replyToId"}` (exact key
//! order, `JSON.stringify` escaping) and the media strings `[img]key`, `[file]key|name|size`,
//! `[voice]key|ms`. Reading additionally accepts the web client's media JSON
//! (`{"type":"image","key",thumbnail?}`, `{"type":"file","key","name","size"}`,
//! `{"type":"voice","key","durationMs"|"duration"}`). Anything that matches no shape is text, so
//! parsing never fails.

use serde_json::Value;

use super::json::js_string;

/// A media reference carried in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Media {
    /// An image; `thumbnail` is the web client's optional data URL.
    Image {
        /// Media key for download.
        key: String,
        /// Optional tiny preview (web JSON shape only).
        thumbnail: Option<String>,
    },
    /// A file.
    File {
        /// Media key for download.
        key: String,
        /// Original file name.
        name: String,
        /// Size in bytes.
        size_bytes: u64,
    },
    /// A voice note.
    Voice {
        /// Media key for download.
        key: String,
        /// Duration in milliseconds.
        duration_ms: u64,
    },
}

impl Media {
    /// The spec's string form (`[img]…`, `[file]…|…|…`, `[voice]…|…`); a thumbnail is not carried.
    pub fn to_spec_string(&self) -> String {
        match self {
            Self::Image { key, .. } => format!("[img]{key}"),
            Self::File {
                key,
                name,
                size_bytes,
            } => format!("[file]{key}|{name}|{size_bytes}"),
            Self::Voice { key, duration_ms } => format!("[voice]{key}|{duration_ms}"),
        }
    }

    /// Parses the spec's string form. A file name may contain `|` (key is up to the first `|`,
    /// size after the last one).
    pub fn parse_spec_string(s: &str) -> Option<Self> {
        if let Some(key) = s.strip_prefix("[img]") {
            return (!key.is_empty()).then(|| Self::Image {
                key: key.to_owned(),
                thumbnail: None,
            });
        }
        if let Some(rest) = s.strip_prefix("[file]") {
            let (key, rest) = rest.split_once('|')?;
            let (name, size) = rest.rsplit_once('|')?;
            if key.is_empty() {
                return None;
            }
            return Some(Self::File {
                key: key.to_owned(),
                name: name.to_owned(),
                size_bytes: parse_decimal(size)?,
            });
        }
        if let Some(rest) = s.strip_prefix("[voice]") {
            let (key, ms) = rest.rsplit_once('|')?;
            if key.is_empty() {
                return None;
            }
            return Some(Self::Voice {
                key: key.to_owned(),
                duration_ms: parse_decimal(ms)?,
            });
        }
        None
    }

    /// Parses the web client's JSON media shapes.
    pub fn parse_web_json(v: &Value) -> Option<Self> {
        let o = v.as_object()?;
        let key = o.get("key")?.as_str()?.to_owned();
        if key.is_empty() {
            return None;
        }
        match o.get("type")?.as_str()? {
            "image" => Some(Self::Image {
                key,
                thumbnail: o
                    .get("thumbnail")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            "file" => Some(Self::File {
                key,
                name: o.get("name")?.as_str()?.to_owned(),
                size_bytes: json_u64(o.get("size")?)?,
            }),
            "voice" => Some(Self::Voice {
                key,
                duration_ms: json_u64(o.get("durationMs").or_else(|| o.get("duration"))?)?,
            }),
            _ => None,
        }
    }
}

fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn json_u64(v: &Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return Some(u);
    }
    let f = v.as_f64()?;
    // Accept integral non-negative floats such as 3000.0 (JS has one number type).
    (f >= 0.0 && f.fract() == 0.0 && f < 9.007_199_254_740_992e15).then_some(f as u64)
}

/// Parsed content of a decrypted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageContent {
    /// Plain text (also the fallback for anything unrecognised).
    Text(String),
    /// A reply: the quoted message id and the replying content (text or media, never a reply).
    Reply {
        /// Id of the message replied to.
        reply_to_id: String,
        /// The content of the reply itself.
        body: Box<Self>,
    },
    /// Media (image, file or voice).
    Media(Media),
}

impl MessageContent {
    /// Parses any inbound plaintext; never fails.
    pub fn parse(plaintext: &str) -> Self {
        if let Some((text, reply_to_id)) = decode_reply(plaintext) {
            return Self::Reply {
                reply_to_id,
                body: Box::new(Self::parse_unwrapped(&text)),
            };
        }
        Self::parse_unwrapped(plaintext)
    }

    fn parse_unwrapped(plaintext: &str) -> Self {
        if let Some(m) = Media::parse_spec_string(plaintext) {
            return Self::Media(m);
        }
        if plaintext.starts_with('{')
            && let Ok(v) = serde_json::from_str::<Value>(plaintext)
            && let Some(m) = Media::parse_web_json(&v)
        {
            return Self::Media(m);
        }
        Self::Text(plaintext.to_owned())
    }

    /// The plaintext to encrypt for this content (spec forms; replies use the wrapper).
    pub fn encode(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Media(m) => m.to_spec_string(),
            Self::Reply { reply_to_id, body } => encode_reply(&body.encode(), reply_to_id),
        }
    }
}

/// The reply wrapper exactly as the web client writes it: `{"text":…,"replyToId":…}`.
pub fn encode_reply(text: &str, reply_to_id: &str) -> String {
    format!(
        "{{\"text\":{},\"replyToId\":{}}}",
        js_string(text),
        js_string(reply_to_id)
    )
}

/// Unwraps a reply only when `replyToId` is a non-empty string and `text` is a string.
pub fn decode_reply(plaintext: &str) -> Option<(String, String)> {
    if !plaintext.starts_with('{') {
        return None;
    }
    let v: Value = serde_json::from_str(plaintext).ok()?;
    let o = v.as_object()?;
    let id = o.get("replyToId")?.as_str()?;
    if id.is_empty() {
        return None;
    }
    let text = o.get("text")?.as_str()?;
    Some((text.to_owned(), id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_wrapper_exact() {
        assert_eq!(
            encode_reply("a reply", "msg-0"),
            r#"{"text":"a reply","replyToId":"msg-0"}"#
        );
        assert_eq!(
            encode_reply("这是回复", "msg-original-001"),
            "{\"text\":\"这是回复\",\"replyToId\":\"msg-original-001\"}"
        );
        assert_eq!(
            MessageContent::parse(r#"{"text":"a reply","replyToId":"msg-0"}"#),
            MessageContent::Reply {
                reply_to_id: "msg-0".into(),
                body: Box::new(MessageContent::Text("a reply".into()))
            }
        );
        // falsy replyToId or non-string text: shown raw
        for raw in [
            r#"{"text":"x","replyToId":""}"#,
            r#"{"text":1,"replyToId":"m"}"#,
            r#"{"text":"x"}"#,
            "{not json",
        ] {
            assert_eq!(MessageContent::parse(raw), MessageContent::Text(raw.into()));
        }
    }

    #[test]
    fn media_forms() {
        let f = MessageContent::parse("[file]media/abc123|report.pdf|48213");
        assert_eq!(
            f,
            MessageContent::Media(Media::File {
                key: "media/abc123".into(),
                name: "report.pdf".into(),
                size_bytes: 48213
            })
        );
        assert_eq!(f.encode(), "[file]media/abc123|report.pdf|48213");
        assert_eq!(
            Media::parse_spec_string("[file]k|a|b.txt|7"),
            Some(Media::File {
                key: "k".into(),
                name: "a|b.txt".into(),
                size_bytes: 7
            })
        );
        assert_eq!(
            MessageContent::parse("[voice]media/v1|5230"),
            MessageContent::Media(Media::Voice {
                key: "media/v1".into(),
                duration_ms: 5230
            })
        );
        assert_eq!(
            MessageContent::parse("[img]k1").encode(),
            "[img]k1".to_owned()
        );
        for bad in [
            "[img]",
            "[file]k|n",
            "[voice]k|x",
            "[voice]|5",
            "[file]k|n|-1",
        ] {
            assert_eq!(MessageContent::parse(bad), MessageContent::Text(bad.into()));
        }
        assert_eq!(
            MessageContent::parse(r#"{"type":"image","key":"k1","thumbnail":"data:x"}"#),
            MessageContent::Media(Media::Image {
                key: "k1".into(),
                thumbnail: Some("data:x".into())
            })
        );
        assert_eq!(
            MessageContent::parse(r#"{"type":"file","key":"k","name":"doc.pdf","size":2000}"#),
            MessageContent::Media(Media::File {
                key: "k".into(),
                name: "doc.pdf".into(),
                size_bytes: 2000
            })
        );
        for v in [
            r#"{"type":"voice","key":"k","durationMs":3000}"#,
            r#"{"type":"voice","key":"k","duration":3000}"#,
        ] {
            assert_eq!(
                MessageContent::parse(v),
                MessageContent::Media(Media::Voice {
                    key: "k".into(),
                    duration_ms: 3000
                })
            );
        }
        // a media reply: media JSON inside the wrapper's text
        let inner = r#"{"type":"image","key":"k9"}"#;
        let wrapped = encode_reply(inner, "m1");
        assert_eq!(
            MessageContent::parse(&wrapped),
            MessageContent::Reply {
                reply_to_id: "m1".into(),
                body: Box::new(MessageContent::Media(Media::Image {
                    key: "k9".into(),
                    thumbnail: None
                }))
            }
        );
    }
}
