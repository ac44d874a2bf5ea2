//! The direct decode and encode of the frames every message costs (see
//! [`ClientFrame::decode`] and [`ServerFrame::encode`]).

use serde::Deserialize;

use super::{ClientFrame, MsgFrame, ReceiptDelivery, ServerFrame};
use crate::json;
use crate::limits::{MAX_FRAME_BYTES, MAX_MSG_PAYLOAD_BYTES};

impl ClientFrame {
    /// The frames every message costs (`msg`, `delivered`, `read`) decoded straight from the
    /// text into their types, without the intermediate JSON tree of `decode_general`.
    /// `None` for anything else and for anything it does not accept (a malformed field, a
    /// duplicated key, an oversized payload): the general path then gives the same frame or the
    /// error the peer is owed.
    pub(super) fn decode_hot(text: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Tag<'a> {
            #[serde(rename = "type", borrow)]
            frame_type: std::borrow::Cow<'a, str>,
        }
        if text.len() > MAX_FRAME_BYTES {
            return None;
        }
        let tag: Tag<'_> = serde_json::from_str(text).ok()?;
        match &*tag.frame_type {
            "msg" => serde_json::from_str::<MsgFrame>(text)
                .ok()
                .filter(|m| m.payload.len() <= MAX_MSG_PAYLOAD_BYTES)
                .map(Self::Msg),
            "delivered" => serde_json::from_str(text).ok().map(Self::Delivered),
            "read" => serde_json::from_str(text).ok().map(Self::Read),
            _ => None,
        }
    }
}

impl ServerFrame {
    /// The frames every message costs (`ack`, `msg`, `delivered`, `read`) written straight to
    /// text ([`crate::json`]): byte for byte what the general (`serde_json`) encoder writes, in
    /// one buffer of the right size. `None` for every other frame.
    pub(super) fn encode_hot(&self) -> Option<String> {
        let mut out = Vec::new();
        match self {
            Self::Ack(f) => {
                out.reserve(FRAME + f.id.as_str().len());
                out.extend_from_slice(br#"{"type":"ack","id":"#);
                json::id(&mut out, f.id.as_str());
                out.extend_from_slice(br#","seq":"#);
                json::uint(&mut out, f.seq.get());
            }
            Self::Msg(f) => {
                let strings = f.id.as_str().len()
                    + f.from.as_str().len()
                    + f.conv_id.as_str().len()
                    + f.payload.len();
                out.reserve(FRAME + strings);
                out.extend_from_slice(br#"{"type":"msg","id":"#);
                json::id(&mut out, f.id.as_str());
                out.extend_from_slice(br#","from":"#);
                json::id(&mut out, f.from.as_str());
                out.extend_from_slice(br#","conv_id":"#);
                json::id(&mut out, f.conv_id.as_str());
                out.extend_from_slice(br#","seq":"#);
                json::uint(&mut out, f.seq.get());
                out.extend_from_slice(br#","at":"#);
                json::uint(&mut out, f.at.get());
                if let Some(v) = f.crypto_v {
                    out.extend_from_slice(br#","crypto_v":"#);
                    json::uint(&mut out, u64::from(v));
                }
                out.extend_from_slice(br#","payload":"#);
                json::string(&mut out, &f.payload);
            }
            Self::Delivered(f) => receipt(&mut out, b"delivered", f),
            Self::Read(f) => receipt(&mut out, b"read", f),
            _ => return None,
        }
        out.push(b'}');
        String::from_utf8(out).ok()
    }
}

/// Bytes of a frame but for its strings, at most (keys, quotes, three 20-digit numbers).
const FRAME: usize = 160;

/// A `delivered` or `read` frame but for its closing brace.
fn receipt(out: &mut Vec<u8>, kind: &[u8], f: &ReceiptDelivery) {
    let aliases = [&f.from, &f.to]
        .into_iter()
        .flatten()
        .map(|a| a.as_str().len())
        .sum::<usize>();
    out.reserve(FRAME + f.conv_id.as_str().len() + aliases);
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(kind);
    out.extend_from_slice(br#"","conv_id":"#);
    json::id(out, f.conv_id.as_str());
    out.extend_from_slice(br#","seq":"#);
    json::uint(out, f.seq.get());
    for (name, alias) in [(&br#","from":"#[..], &f.from), (br#","to":"#, &f.to)] {
        if let Some(alias) = alias {
            out.extend_from_slice(name);
            json::id(out, alias.as_str());
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{AckFrame, ClientFrame, MsgDelivery, ReceiptDelivery, ServerFrame};
    use crate::ids::{AliasId, ConvId, MessageId, Seq};
    use crate::time::UnixMs;

    /// A JSON value for a field, of the right shape or not.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("\"c-1\"".to_owned()),
            Just("\"u12345678\"".to_owned()),
            Just("\"m\\u002d1\"".to_owned()),
            Just("\"a b\"".to_owned()),
            Just("\"\"".to_owned()),
            Just("7".to_owned()),
            Just("-1".to_owned()),
            Just("1.5".to_owned()),
            Just("null".to_owned()),
            Just("{}".to_owned()),
            Just("[1]".to_owned()),
            (0usize..70_000).prop_map(|n| format!("\"{}\"", "A".repeat(n))),
        ]
    }

    /// An object with a `type` and a random choice of fields (repeats allowed).
    fn frame_text() -> impl Strategy<Value = String> {
        let ty = prop_oneof![
            Just("\"msg\""),
            Just("\"delivered\""),
            Just("\"read\""),
            Just("\"typing\""),
            Just("\"m\\u0073g\""),
            Just("1"),
        ];
        let key = prop_oneof![
            Just("id"),
            Just("to"),
            Just("conv_id"),
            Just("seq"),
            Just("crypto_v"),
            Just("payload"),
            Just("type"),
            Just("extra"),
        ];
        (ty, prop::collection::vec((key, value()), 0..9)).prop_map(|(ty, fields)| {
            let mut parts = vec![format!("\"type\":{ty}")];
            parts.extend(fields.into_iter().map(|(k, v)| format!("\"{k}\":{v}")));
            format!("{{{}}}", parts.join(","))
        })
    }

    /// A well-formed hot frame, so that the fast path is exercised, not only refused.
    fn hot_text() -> impl Strategy<Value = String> {
        (prop::bool::ANY, 1u64..1_000, "[A-Za-z0-9+/=]{0,64}").prop_map(|(msg, seq, payload)| {
            if msg {
                format!(
                    r#"{{"type":"msg","id":"m-{seq}","to":"u1234","conv_id":"c-1","crypto_v":1,"payload":"{payload}"}}"#
                )
            } else {
                format!(r#"{{"type":"read","conv_id":"c-1","seq":{seq},"to":"u1234"}}"#)
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_hot_path_decodes_exactly_what_the_general_path_decodes(
            text in prop_oneof![frame_text(), hot_text()]
        ) {
            if let Some(hot) = ClientFrame::decode_hot(&text) {
                prop_assert_eq!(Ok(hot), ClientFrame::decode_general(&text));
            }
        }
    }

    /// A frame the relay sends for every message, with ids of any valid shape and a payload of
    /// any text (escapes, control characters, non-ASCII, long enough to cross blocks).
    fn hot_server_frame() -> impl Strategy<Value = ServerFrame> {
        let token = || "[A-Za-z0-9._:-]{1,40}";
        let alias = || "[a-z0-9_]{3,32}";
        let payload = prop_oneof![
            "[A-Za-z0-9+/=]{0,700}".boxed(),
            any::<String>().boxed(),
            (any::<String>(), 0usize..30)
                .prop_map(|(s, n)| s.repeat(n))
                .boxed(),
        ];
        let msg = (
            token(),
            alias(),
            token(),
            any::<u64>(),
            any::<u64>(),
            any::<Option<u32>>(),
            payload,
        )
            .prop_map(|(id, from, conv, seq, at, crypto_v, payload)| {
                ServerFrame::Msg(MsgDelivery {
                    id: MessageId::parse(&id).unwrap(),
                    from: AliasId::parse(&from).unwrap(),
                    conv_id: ConvId::parse(&conv).unwrap(),
                    seq: Seq(seq),
                    at: UnixMs(at),
                    crypto_v,
                    payload: payload.into(),
                })
            });
        let ack = (token(), any::<u64>()).prop_map(|(id, seq)| {
            ServerFrame::Ack(AckFrame {
                id: MessageId::parse(&id).unwrap(),
                seq: Seq(seq),
            })
        });
        let receipt = (
            any::<bool>(),
            token(),
            any::<u64>(),
            proptest::option::of(alias()),
            proptest::option::of(alias()),
        )
            .prop_map(|(read, conv, seq, from, to)| {
                let f = ReceiptDelivery {
                    conv_id: ConvId::parse(&conv).unwrap(),
                    seq: Seq(seq),
                    from: from.map(|a| AliasId::parse(&a).unwrap()),
                    to: to.map(|a| AliasId::parse(&a).unwrap()),
                };
                if read {
                    ServerFrame::Read(f)
                } else {
                    ServerFrame::Delivered(f)
                }
            });
        prop_oneof![msg, ack, receipt]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_hot_path_encodes_exactly_what_the_general_path_encodes(
            frame in hot_server_frame()
        ) {
            let hot = frame.encode_hot();
            prop_assert!(hot.is_some(), "a hot frame left to the general path");
            prop_assert_eq!(hot.unwrap(), super::super::to_json(&frame));
            prop_assert_eq!(ServerFrame::decode(&frame.encode()), Ok(frame));
        }
    }

    #[test]
    fn other_frames_are_left_to_the_general_encoder() {
        let goaway = ServerFrame::decode(r#"{"type":"goaway","reason":"idle"}"#).unwrap();
        assert_eq!(goaway.encode_hot(), None);
    }

    #[test]
    fn the_hot_path_takes_well_formed_messages_and_receipts() {
        let msg = r#"{"type":"msg","id":"m-1","to":"u1234","conv_id":"c-1","crypto_v":1,"payload":"QUJD"}"#;
        let read = r#"{"type":"read","conv_id":"c-1","seq":3,"to":"u1234"}"#;
        for text in [msg, read] {
            assert!(ClientFrame::decode_hot(text).is_some(), "{text}");
        }
        let dup = r#"{"type":"read","conv_id":"c-1","seq":3,"seq":4,"to":"u1234"}"#;
        assert!(ClientFrame::decode_hot(dup).is_none());
        assert!(
            ClientFrame::decode(dup).is_ok(),
            "the general path keeps the last value"
        );
    }
}
