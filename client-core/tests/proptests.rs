//! Property tests: round trips and "any flipped bit is rejected".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use client_core::crypto::call_frame::{
    CallDirection, FrameDecryptor, FrameEncryptor, derive_call_key_material,
};
use client_core::crypto::content::{Media, MessageContent, decode_reply, encode_reply};
use client_core::crypto::media::{decrypt_media, encrypt_media};
use client_core::crypto::signal::{
    NonceCache, SignalEnvelope, SignatureCoverage, open_signal, seal_signal, sign_signal,
    verify_signal,
};
use client_core::crypto::{SessionKey, decrypt_payload, encrypt_payload};
use client_core::encoding::{from_base64, to_base64};
use client_core::keys::SigningKeyPair;
use proptest::prelude::*;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Map, Value, json};

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn payload_round_trip_and_tamper(key in any::<[u8; 32]>(), seed in any::<u64>(),
                                     pt in proptest::collection::vec(any::<u8>(), 0..300),
                                     bit in any::<usize>()) {
        let k = SessionKey::from_bytes(key);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let p = encrypt_payload(&k, &pt, &mut rng);
        prop_assert_eq!(decrypt_payload(&k, &p).unwrap(), pt);
        let mut raw = from_base64(&p).unwrap();
        let i = bit % (raw.len() * 8);
        raw[i / 8] ^= 1 << (i % 8);
        prop_assert!(decrypt_payload(&k, &to_base64(&raw)).is_err());
    }

    #[test]
    fn media_round_trip_and_tamper(key in any::<[u8; 32]>(), seed in any::<u64>(),
                                   pt in proptest::collection::vec(any::<u8>(), 0..2000),
                                   bit in any::<usize>()) {
        let k = SessionKey::from_bytes(key);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let frames = encrypt_media(&k, &pt, &mut rng);
        let obj: Vec<u8> = frames.concat();
        prop_assert_eq!(decrypt_media(&k, &obj).unwrap(), pt);
        let mut t = obj.clone();
        let i = bit % (t.len() * 8);
        t[i / 8] ^= 1 << (i % 8);
        prop_assert!(decrypt_media(&k, &t).is_err());
        // any strict prefix fails too
        let cut = bit % obj.len();
        if cut > 0 {
            prop_assert!(decrypt_media(&k, &obj[..cut]).is_err());
        }
    }

    #[test]
    fn call_frames_round_trip_and_tamper(key in any::<[u8; 32]>(), call in "[a-z0-9-]{1,36}",
                                         frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..20),
                                         bit in any::<usize>()) {
        let sk = SessionKey::from_bytes(key);
        let km = derive_call_key_material(&sk, &call, CallDirection::CalleeToCaller);
        let mut e = FrameEncryptor::new(&km);
        let mut d = FrameDecryptor::new(&km);
        let sealed: Vec<Vec<u8>> = frames.iter().map(|f| e.encrypt(f).unwrap().bytes).collect();
        // deliver in reverse order: still accepted (window, not ordering)
        for (f, s) in frames.iter().zip(&sealed).rev() {
            let mut t = s.clone();
            let i = bit % (t.len() * 8);
            t[i / 8] ^= 1 << (i % 8);
            prop_assert!(d.decrypt(&t).is_err());
            prop_assert_eq!(&d.decrypt(s).unwrap(), f);
            prop_assert!(d.decrypt(s).is_err());
        }
    }

    #[test]
    fn content_round_trip(text in ".{0,40}", id in "[a-z0-9-]{1,20}", key in "[a-z0-9/]{1,20}",
                          name in "[^|]{0,10}", size in any::<u64>()) {
        let w = encode_reply(&text, &id);
        prop_assert_eq!(decode_reply(&w), Some((text.clone(), id)));
        let v: Value = serde_json::from_str(&w).unwrap();
        prop_assert_eq!(v["text"].as_str(), Some(text.as_str()));
        let m = MessageContent::Media(Media::File { key, name, size_bytes: size });
        prop_assert_eq!(MessageContent::parse(&m.encode()), m);
    }

    #[test]
    fn signals_round_trip_and_tamper(seed in any::<u64>(), sdp in ".{0,60}", mid in ".{0,8}",
                                     idx in 0u32..10, now in 1_600_000_000_000u64..1_900_000_000_000,
                                     bit in any::<usize>()) {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let signer = SigningKeyPair::from_private_bytes(&[7; 32]);
        let sk = SessionKey::from_bytes([8; 32]);
        let mut fields = Map::new();
        fields.insert("type".into(), json!("call_ice"));
        fields.insert("call_id".into(), json!("c-1"));
        fields.insert("from".into(), json!("u1"));
        fields.insert("candidate".into(), json!({"candidate": sdp, "sdpMid": mid, "sdpMLineIndex": idx}));
        let env = SignalEnvelope { frame_type: "call_ice", from: "u1", call_id: "c-1" };
        let pk = signer.public_key();
        let payload = seal_signal(&sk, &signer, fields.clone(), now, &mut rng).unwrap();
        let mut cache = NonceCache::new();
        let ok = open_signal(&sk, &payload, env, Some(&pk), now + 1000, &mut cache).unwrap();
        prop_assert_eq!(ok.coverage, SignatureCoverage::Full);
        prop_assert_eq!(&ok.fields, &fields);
        // flipped ciphertext bit
        let mut raw = from_base64(&payload).unwrap();
        let i = bit % (raw.len() * 8);
        raw[i / 8] ^= 1 << (i % 8);
        prop_assert!(open_signal(&sk, &to_base64(&raw), env, Some(&pk), now, &mut NonceCache::new()).is_err());
        // a nested field the web canonical form does not cover is still protected by _body
        let inner = sign_signal(&signer, fields, now, &mut rng).unwrap();
        let mut t = inner.clone();
        t["candidate"]["sdpMLineIndex"] = json!(idx + 1);
        prop_assert!(verify_signal(&t, env, Some(&pk), now, &mut NonceCache::new()).is_err());
        let mut t = inner.clone();
        t.remove("_body");
        t["candidate"]["sdpMid"] = json!(format!("{mid}x"));
        prop_assert!(verify_signal(&t, env, Some(&pk), now, &mut NonceCache::new()).is_err());
        prop_assert!(verify_signal(&inner, env, Some(&pk), now, &mut NonceCache::new()).is_ok());
    }
}
