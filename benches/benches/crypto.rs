//! Crypto paths of issue 8 item 1, each next to a `ring` 0.17 baseline (item 2) in the same run.
//!
//! Naming: one criterion group per path; inside it the function `client-core` (our public API),
//! `rustcrypto` (the mandated crates used directly, where client-core has no public function yet)
//! and `ring` (the baseline doing the same work). Groups whose name starts with `primitive/` bench
//! a path that client-core does not expose yet: switch them to the client-core function when it
//! lands (each has a `TODO(client-core)` comment) and drop the prefix.
//!
//! Run: `cargo bench -p benches --bench crypto` (a filter narrows it: `-- 'aes256gcm|ed25519'`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use aes_gcm::aead::{Aead as _, AeadInOut as _, KeyInit as _};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use benches::MachineInfo;
use client_core::encoding::{from_base64, from_hex_array, to_base64, to_hex};
use client_core::keys::{
    self, EcdhKeyPair, SigningKeyPair, X25519Path, compute_security_code, derive_identity,
    verify_challenge_signature,
};
use client_core::pow::{leading_zero_nibbles, solve_pow};
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
    measurement::WallTime,
};
use hmac::{Hmac, Mac as _};
use ring::{
    aead, agreement, digest, hkdf as rhkdf, hmac as rhmac, pbkdf2, rand as rrand, signature,
};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256, Sha512};

/// A valid 12-word BIP-39 mnemonic (the all-`abandon` test vector).
const MNEMONIC: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
/// An auth challenge as the relay hands it out (64 ASCII chars, signed as UTF-8 bytes).
const AUTH_CHALLENGE: &str = "3f1c2b7d9e8a4c6f0b5d2e7a9c1f4b8d6e0a3c5f7b9d1e2a4c6f8b0d2e4a6c8f";
const CONVERSATION_ID: &str = "c-7d2f9a41-5b3e-4c8d-9f10-2a6b8c4e1d37";
/// HKDF info of the session key (PROTOCOL §4.3).
const SESSION_KEY_INFO: &[u8] = b"securechat-session-v1";
const PAYLOAD_SIZES: [usize; 2] = [200, 16 * 1024];
const MEDIA_CHUNK_BYTES: usize = 5 * 1024 * 1024;
const CALL_FRAME_BYTES: usize = 1200;
const POW_DIFFICULTY: u32 = 4;
const POW_CHALLENGES: usize = 8;
const IV_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

fn seed(tag: u8) -> [u8; 32] {
    let mut s = [0u8; 32];
    for (i, b) in s.iter_mut().enumerate() {
        *b = tag
            .wrapping_mul(31)
            .wrapping_add(u8::try_from(i).unwrap_or(0));
    }
    s
}

/// Deterministic IVs: a counter in the first 8 bytes (a bench never needs fresh randomness, and a
/// counter never repeats an IV under one key either).
#[derive(Debug, Default)]
struct IvCounter(u64);

impl IvCounter {
    fn next_iv(&mut self) -> [u8; IV_BYTES] {
        self.0 += 1;
        let mut iv = [0u8; IV_BYTES];
        iv[..8].copy_from_slice(&self.0.to_be_bytes());
        iv
    }
}

fn plaintext(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn ring_key(key: &[u8; 32]) -> aead::LessSafeKey {
    aead::LessSafeKey::new(
        aead::UnboundKey::new(&aead::AES_256_GCM, key).expect("32-byte AES-256-GCM key"),
    )
}

fn ring_ed25519(seed: &[u8; 32]) -> signature::Ed25519KeyPair {
    signature::Ed25519KeyPair::from_seed_unchecked(seed).expect("32-byte Ed25519 seed")
}

// ---------------------------------------------------------------- Ed25519 (auth challenge)

fn ed25519(c: &mut Criterion) {
    let ours = SigningKeyPair::from_private_bytes(&seed(1));
    let theirs = ring_ed25519(&seed(1));
    let pk_b64 = to_base64(&ours.public_key());
    let sig_b64 = to_base64(&ours.sign(AUTH_CHALLENGE.as_bytes()));

    // Both sides produce / consume the base64 wire form, as the auth exchange does (§1.1.3).
    let mut g = c.benchmark_group("ed25519_sign_challenge");
    g.bench_function("client-core", |b| {
        b.iter(|| to_base64(&ours.sign(black_box(AUTH_CHALLENGE).as_bytes())));
    });
    g.bench_function("ring", |b| {
        b.iter(|| to_base64(theirs.sign(black_box(AUTH_CHALLENGE).as_bytes()).as_ref()));
    });
    g.finish();

    let mut g = c.benchmark_group("ed25519_verify_challenge");
    g.bench_function("client-core", |b| {
        b.iter(|| {
            verify_challenge_signature(black_box(&pk_b64), AUTH_CHALLENGE, black_box(&sig_b64))
                .expect("valid signature");
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let pk = from_base64(black_box(&pk_b64)).expect("base64 key");
            let sig = from_base64(black_box(&sig_b64)).expect("base64 signature");
            signature::UnparsedPublicKey::new(&signature::ED25519, pk)
                .verify(AUTH_CHALLENGE.as_bytes(), &sig)
                .expect("valid signature");
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- X25519, HKDF, session key

fn key_agreement(c: &mut Criterion) {
    let rng = rrand::SystemRandom::new();
    let mine = EcdhKeyPair::from_private_bytes(seed(2));
    let their_public = EcdhKeyPair::from_private_bytes(seed(3)).public_key();

    let mut g = c.benchmark_group("x25519_keygen");
    g.bench_function("client-core", |b| {
        b.iter(|| EcdhKeyPair::from_private_bytes(black_box(seed(4))).public_key());
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            agreement::EphemeralPrivateKey::generate(&agreement::X25519, &rng)
                .expect("system RNG")
                .compute_public_key()
                .expect("X25519 public key")
        });
    });
    g.finish();

    // ring only agrees with ephemeral keys, so its row includes generating one (a fixed-base
    // multiplication plus a getrandom call); subtract `x25519_keygen/ring` for the agreement alone.
    let mut g = c.benchmark_group("x25519_agree");
    g.bench_function("client-core", |b| {
        b.iter(|| mine.diffie_hellman(black_box(&their_public)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_agree(&rng, black_box(&their_public)));
    });
    g.finish();

    let shared = mine.diffie_hellman(&their_public);
    let salt = Sha256::digest(CONVERSATION_ID.as_bytes());
    let mut g = c.benchmark_group("hkdf_sha256_32B");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| rc_hkdf(black_box(&shared), &salt));
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_hkdf(black_box(&shared), &salt));
    });
    g.finish();

    // TODO(client-core): switch to `client_core::crypto::session_key` when `crypto` is public.
    let mut g = c.benchmark_group("primitive/session_key");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            let shared = mine.diffie_hellman(black_box(&their_public));
            rc_hkdf(
                &shared,
                &Sha256::digest(black_box(CONVERSATION_ID).as_bytes()),
            )
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let shared = ring_agree(&rng, black_box(&their_public));
            let salt = digest::digest(&digest::SHA256, black_box(CONVERSATION_ID).as_bytes());
            ring_hkdf(&shared, salt.as_ref())
        });
    });
    g.finish();
}

fn ring_agree(rng: &rrand::SystemRandom, their_public: &[u8; 32]) -> [u8; 32] {
    let key = agreement::EphemeralPrivateKey::generate(&agreement::X25519, rng).expect("RNG");
    agreement::agree_ephemeral(
        key,
        &agreement::UnparsedPublicKey::new(&agreement::X25519, their_public),
        |s| {
            let mut out = [0u8; 32];
            out.copy_from_slice(s);
            out
        },
    )
    .expect("X25519 agreement")
}

fn rc_hkdf(ikm: &[u8], salt: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    hkdf::Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand(SESSION_KEY_INFO, &mut out)
        .expect("32 bytes is a valid HKDF length");
    out
}

fn ring_hkdf(ikm: &[u8], salt: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    rhkdf::Salt::new(rhkdf::HKDF_SHA256, salt)
        .extract(ikm)
        .expand(&[SESSION_KEY_INFO], rhkdf::HKDF_SHA256)
        .expect("32 bytes is a valid HKDF length")
        .fill(&mut out)
        .expect("output length matches");
    out
}

// ---------------------------------------------------------------- hashes and MACs

fn hashes(c: &mut Criterion) {
    let msg64 = plaintext(64);
    let mut g = c.benchmark_group("sha256_64B");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| Sha256::digest(black_box(&msg64)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| digest::digest(&digest::SHA256, black_box(&msg64)));
    });
    g.finish();

    // One-shot MAC including the key schedule, as a caller with a fresh key does it.
    let key = seed(5);
    let mut g = c.benchmark_group("hmac_sha256_64B");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            let mut m = <Hmac<Sha256>>::new_from_slice(black_box(&key)).expect("any key length");
            m.update(black_box(&msg64));
            m.finalize().into_bytes()
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let k = rhmac::Key::new(rhmac::HMAC_SHA256, black_box(&key));
            rhmac::sign(&k, black_box(&msg64))
        });
    });
    g.finish();

    // One SLIP-0010 hardened child step: HMAC-SHA512(chain code, 0x00 ‖ k ‖ index).
    let mut data = vec![0u8];
    data.extend_from_slice(&seed(6));
    data.extend_from_slice(&0x8000_002c_u32.to_be_bytes());
    let mut g = c.benchmark_group("hmac_sha512_slip10_step");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            let mut m = <Hmac<Sha512>>::new_from_slice(black_box(&key)).expect("any key length");
            m.update(black_box(&data));
            m.finalize().into_bytes()
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let k = rhmac::Key::new(rhmac::HMAC_SHA512, black_box(&key));
            rhmac::sign(&k, black_box(&data))
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- mnemonic to identity

fn identity(c: &mut Criterion) {
    let mut g = c.benchmark_group("mnemonic_to_identity");
    g.sample_size(20);
    g.bench_function("client-core", |b| {
        b.iter(|| derive_identity(black_box(MNEMONIC), X25519Path::Spec).expect("valid mnemonic"));
    });
    // ring has no X25519 import of a raw private key, so its row stops at the Ed25519 key pair
    // (the X25519 public key is one more fixed-base multiplication, see `x25519_keygen`).
    g.bench_function("ring", |b| {
        b.iter(|| {
            let mut seed = [0u8; 64];
            pbkdf2::derive(
                pbkdf2::PBKDF2_HMAC_SHA512,
                NonZeroU32::new(2048).expect("non-zero"),
                b"mnemonic",
                black_box(MNEMONIC).as_bytes(),
                &mut seed,
            );
            let ed = ring_slip10(&seed, &keys::ED25519_PATH);
            let x = ring_slip10(&seed, &keys::X25519_SPEC_PATH);
            (ring_ed25519(&ed), x)
        });
    });
    g.finish();
}

fn ring_slip10(seed: &[u8], path: &[u32]) -> [u8; 32] {
    let split = |tag: rhmac::Tag| {
        let (mut k, mut c) = ([0u8; 32], [0u8; 32]);
        k.copy_from_slice(&tag.as_ref()[..32]);
        c.copy_from_slice(&tag.as_ref()[32..]);
        (k, c)
    };
    let master = rhmac::Key::new(rhmac::HMAC_SHA512, b"ed25519 seed");
    let (mut k, mut c) = split(rhmac::sign(&master, seed));
    for &index in path {
        let mut ctx = rhmac::Context::with_key(&rhmac::Key::new(rhmac::HMAC_SHA512, &c));
        ctx.update(&[0u8]);
        ctx.update(&k);
        ctx.update(&(index | 0x8000_0000).to_be_bytes());
        (k, c) = split(ctx.sign());
    }
    k
}

// ---------------------------------------------------------------- AES-256-GCM

/// The raw AEAD with the key schedule done once, in place: the crypto crates alone.
fn aes_gcm_raw(c: &mut Criterion) {
    let key = seed(7);
    let ours = Aes256Gcm::new(&key.into());
    let theirs = ring_key(&key);
    for (name, sizes) in [
        ("aes256gcm_seal", &[200, 16 * 1024, MEDIA_CHUNK_BYTES][..]),
        ("aes256gcm_open", &[200, 16 * 1024, MEDIA_CHUNK_BYTES][..]),
    ] {
        let mut g = c.benchmark_group(name);
        let seal = name.ends_with("seal");
        for &len in sizes {
            configure_for_size(&mut g, len);
            let pt = plaintext(len);
            let iv = [9u8; IV_BYTES];
            let mut sealed = pt.clone();
            ours.encrypt_in_place(&Nonce::from(iv), b"", &mut sealed)
                .expect("seal");
            let input = if seal { pt } else { sealed };
            let mut buf = Vec::with_capacity(len + TAG_BYTES);
            g.bench_with_input(
                criterion::BenchmarkId::new("rustcrypto", len),
                &input,
                |b, input| {
                    b.iter(|| {
                        buf.clear();
                        buf.extend_from_slice(input);
                        if seal {
                            ours.encrypt_in_place(&Nonce::from(iv), b"", &mut buf)
                        } else {
                            ours.decrypt_in_place(&Nonce::from(iv), b"", &mut buf)
                        }
                        .expect("AES-GCM");
                    });
                },
            );
            g.bench_with_input(
                criterion::BenchmarkId::new("ring", len),
                &input,
                |b, input| {
                    b.iter(|| {
                        buf.clear();
                        buf.extend_from_slice(input);
                        let nonce = aead::Nonce::assume_unique_for_key(iv);
                        if seal {
                            theirs
                                .seal_in_place_append_tag(nonce, aead::Aad::empty(), &mut buf)
                                .expect("seal");
                        } else {
                            theirs
                                .open_in_place(nonce, aead::Aad::empty(), &mut buf)
                                .expect("open");
                        }
                    });
                },
            );
        }
        g.finish();
    }
}

/// Byte throughput for every size; few flat samples for the 5 MiB runs (milliseconds each).
fn configure_for_size(g: &mut BenchmarkGroup<'_, WallTime>, len: usize) {
    g.throughput(Throughput::Bytes(len as u64));
    if len >= 1024 * 1024 {
        g.sample_size(20).sampling_mode(SamplingMode::Flat);
    } else {
        g.sample_size(100).sampling_mode(SamplingMode::Auto);
    }
}

/// `iv ‖ AES-256-GCM(key, iv, pt)` the way client-core's `seal_raw` does it (key schedule per
/// call, one allocation for the ciphertext, one for the envelope).
fn rc_seal(key: &[u8; 32], iv: &[u8; IV_BYTES], pt: &[u8]) -> Vec<u8> {
    let ct = Aes256Gcm::new(&(*key).into())
        .encrypt(&Nonce::from(*iv), pt)
        .expect("plaintext within the AES-GCM limit");
    let mut out = Vec::with_capacity(IV_BYTES + ct.len());
    out.extend_from_slice(iv);
    out.extend_from_slice(&ct);
    out
}

fn rc_open(key: &[u8; 32], data: &[u8]) -> Vec<u8> {
    let (iv, ct) = data.split_at(IV_BYTES);
    let iv: [u8; IV_BYTES] = iv.try_into().expect("12-byte IV");
    Aes256Gcm::new(&(*key).into())
        .decrypt(&Nonce::from(iv), ct)
        .expect("authentic payload")
}

fn ring_seal(key: &[u8; 32], iv: &[u8; IV_BYTES], pt: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IV_BYTES + pt.len() + TAG_BYTES);
    out.extend_from_slice(iv);
    out.extend_from_slice(pt);
    let tag = ring_key(key)
        .seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(*iv),
            aead::Aad::empty(),
            &mut out[IV_BYTES..],
        )
        .expect("seal");
    out.extend_from_slice(tag.as_ref());
    out
}

fn ring_open(key: &[u8; 32], data: &[u8]) -> Vec<u8> {
    let iv: [u8; IV_BYTES] = data[..IV_BYTES].try_into().expect("12-byte IV");
    let mut buf = data[IV_BYTES..].to_vec();
    let len = ring_key(key)
        .open_in_place(
            aead::Nonce::assume_unique_for_key(iv),
            aead::Aad::empty(),
            &mut buf,
        )
        .expect("authentic payload")
        .len();
    buf.truncate(len);
    buf
}

/// Message payloads (§4.4): base64(iv ‖ ct ‖ tag), key schedule per message. Both rows use
/// client-core's strict base64 so the ratio isolates the AEAD.
fn payload(c: &mut Criterion) {
    let key = seed(8);
    // TODO(client-core): switch to `client_core::crypto::{encrypt_payload, decrypt_payload}`.
    let mut g = c.benchmark_group("primitive/payload_encrypt");
    for len in PAYLOAD_SIZES {
        g.throughput(Throughput::Bytes(len as u64));
        let pt = plaintext(len);
        let mut ivs = IvCounter::default();
        g.bench_with_input(
            criterion::BenchmarkId::new("rustcrypto", len),
            &pt,
            |b, pt| {
                b.iter(|| to_base64(&rc_seal(&key, &ivs.next_iv(), black_box(pt))));
            },
        );
        g.bench_with_input(criterion::BenchmarkId::new("ring", len), &pt, |b, pt| {
            b.iter(|| to_base64(&ring_seal(&key, &ivs.next_iv(), black_box(pt))));
        });
    }
    g.finish();

    let mut g = c.benchmark_group("primitive/payload_decrypt");
    for len in PAYLOAD_SIZES {
        g.throughput(Throughput::Bytes(len as u64));
        let b64 = to_base64(&rc_seal(&key, &[3; IV_BYTES], &plaintext(len)));
        g.bench_with_input(
            criterion::BenchmarkId::new("rustcrypto", len),
            &b64,
            |b, s| {
                b.iter(|| rc_open(&key, &from_base64(black_box(s)).expect("base64")));
            },
        );
        g.bench_with_input(criterion::BenchmarkId::new("ring", len), &b64, |b, s| {
            b.iter(|| ring_open(&key, &from_base64(black_box(s)).expect("base64")));
        });
    }
    g.finish();
}

/// Media chunk frame (§4.6): `u32_BE(len) ‖ iv ‖ ct ‖ tag` of one 5 MiB chunk.
fn media(c: &mut Criterion) {
    let key = seed(9);
    let chunk = plaintext(MEDIA_CHUNK_BYTES);
    let frame_of = |sealed: Vec<u8>| {
        let len = u32::try_from(sealed.len() - IV_BYTES).expect("chunk below 4 GiB");
        let mut f = Vec::with_capacity(4 + sealed.len());
        f.extend_from_slice(&len.to_be_bytes());
        f.extend_from_slice(&sealed);
        f
    };
    // TODO(client-core): switch to `client_core::crypto::media` when it lands.
    let mut g = c.benchmark_group("primitive/media_chunk_encrypt");
    configure_for_size(&mut g, MEDIA_CHUNK_BYTES);
    let mut ivs = IvCounter::default();
    g.bench_function("rustcrypto", |b| {
        b.iter(|| frame_of(rc_seal(&key, &ivs.next_iv(), black_box(&chunk))));
    });
    // ring writes the frame in one buffer, as an optimised implementation would.
    g.bench_function("ring", |b| {
        b.iter(|| {
            let iv = ivs.next_iv();
            let len = u32::try_from(MEDIA_CHUNK_BYTES + TAG_BYTES).expect("below 4 GiB");
            let mut f = Vec::with_capacity(4 + IV_BYTES + MEDIA_CHUNK_BYTES + TAG_BYTES);
            f.extend_from_slice(&len.to_be_bytes());
            f.extend_from_slice(&iv);
            f.extend_from_slice(black_box(&chunk));
            let tag = ring_key(&key)
                .seal_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(iv),
                    aead::Aad::empty(),
                    &mut f[4 + IV_BYTES..],
                )
                .expect("seal");
            f.extend_from_slice(tag.as_ref());
            f
        });
    });
    g.finish();

    let frame = frame_of(rc_seal(&key, &[4; IV_BYTES], &chunk));
    let mut g = c.benchmark_group("primitive/media_chunk_decrypt");
    configure_for_size(&mut g, MEDIA_CHUNK_BYTES);
    g.bench_function("rustcrypto", |b| {
        b.iter(|| rc_open(&key, &black_box(&frame)[4..]));
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_open(&key, &black_box(&frame)[4..]));
    });
    g.finish();
}

/// Call media frames (§4.7): IV = base_iv ^ counter_le, output `counter_be ‖ ct ‖ tag`; the
/// cipher lives as long as the call direction, so its key schedule is outside the loop.
fn call_frame(c: &mut Criterion) {
    let km = [seed(10).as_slice(), &[7u8; IV_BYTES]].concat();
    let key: [u8; 32] = km[..32].try_into().expect("32-byte frame key");
    let base_iv: [u8; IV_BYTES] = km[32..44].try_into().expect("12-byte base IV");
    let frame_iv = |counter: u64| {
        let mut iv = base_iv;
        for (b, c) in iv.iter_mut().zip(counter.to_le_bytes()) {
            *b ^= c;
        }
        iv
    };
    let ours = Aes256Gcm::new(&key.into());
    let theirs = ring_key(&key);
    let pt = plaintext(CALL_FRAME_BYTES);

    // TODO(client-core): switch to `client_core::crypto::call_frame` when it lands (it adds the
    // 2048-entry replay window on decrypt).
    let mut g = c.benchmark_group("primitive/call_frame_encrypt");
    g.throughput(Throughput::Bytes(CALL_FRAME_BYTES as u64));
    let mut counter = 0u64;
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            counter += 1;
            let ct = ours
                .encrypt(&Nonce::from(frame_iv(counter)), black_box(pt.as_slice()))
                .expect("seal");
            let mut out = Vec::with_capacity(8 + ct.len());
            out.extend_from_slice(&counter.to_be_bytes());
            out.extend_from_slice(&ct);
            out
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            counter += 1;
            let mut out = Vec::with_capacity(8 + CALL_FRAME_BYTES + TAG_BYTES);
            out.extend_from_slice(&counter.to_be_bytes());
            out.extend_from_slice(black_box(&pt));
            let tag = theirs
                .seal_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(frame_iv(counter)),
                    aead::Aad::empty(),
                    &mut out[8..],
                )
                .expect("seal");
            out.extend_from_slice(tag.as_ref());
            out
        });
    });
    g.finish();

    let counter = 42u64;
    let mut frame = counter.to_be_bytes().to_vec();
    frame.extend(
        ours.encrypt(&Nonce::from(frame_iv(counter)), pt.as_slice())
            .expect("seal"),
    );
    let header = |f: &[u8]| u64::from_be_bytes(f[..8].try_into().expect("8-byte counter"));
    let mut g = c.benchmark_group("primitive/call_frame_decrypt");
    g.throughput(Throughput::Bytes(CALL_FRAME_BYTES as u64));
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            let f = black_box(&frame);
            ours.decrypt(&Nonce::from(frame_iv(header(f))), &f[8..])
                .expect("authentic frame")
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let f = black_box(&frame);
            let mut buf = f[8..].to_vec();
            let len = theirs
                .open_in_place(
                    aead::Nonce::assume_unique_for_key(frame_iv(header(f))),
                    aead::Aad::empty(),
                    &mut buf,
                )
                .expect("authentic frame")
                .len();
            buf.truncate(len);
            buf
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- security code

fn security_code(c: &mut Criterion) {
    let a = EcdhKeyPair::from_private_bytes(seed(11)).public_key();
    let b_pub = EcdhKeyPair::from_private_bytes(seed(12)).public_key();
    let mut g = c.benchmark_group("security_code");
    g.bench_function("client-core", |b| {
        b.iter(|| compute_security_code(black_box(&a), black_box(&b_pub)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let (x, y) = (black_box(&a), black_box(&b_pub));
            let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
            let mut ctx = digest::Context::new(&digest::SHA256);
            ctx.update(lo);
            ctx.update(hi);
            to_hex(&ctx.finish().as_ref()[..30])
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- proof of work

/// Fixed challenges shaped like the relay's: 32 lowercase hex characters.
fn pow_challenges() -> Vec<String> {
    (0..POW_CHALLENGES)
        .map(|i| to_hex(&Sha256::digest(format!("pow-bench-{i}").as_bytes())[..16]))
        .collect()
}

fn pow(c: &mut Criterion) {
    let challenges = pow_challenges();
    // Attempts per challenge are a property of the challenge set, computed outside the timing.
    let attempts: u64 = challenges
        .iter()
        .map(|ch| {
            let nonce = solve_pow(ch, POW_DIFFICULTY).expect("solvable at difficulty 4");
            nonce.parse::<u64>().expect("decimal nonce") + 1
        })
        .sum();
    println!(
        "pow_d4: {} challenges, {attempts} attempts in total, mean {:.0} nonces per solve \
         (expected 65536); divide a row's time by {} for the time per solve",
        challenges.len(),
        attempts as f64 / challenges.len() as f64,
        challenges.len(),
    );

    let mut g = c.benchmark_group("pow_d4_set_of_8");
    g.sample_size(10).sampling_mode(SamplingMode::Flat);
    // Elements = SHA-256 attempts, so criterion reports attempts per second.
    g.throughput(Throughput::Elements(attempts));
    g.bench_function("client-core", |b| {
        b.iter(|| {
            for ch in &challenges {
                black_box(solve_pow(black_box(ch), POW_DIFFICULTY).expect("solvable"));
            }
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            for ch in &challenges {
                black_box(ring_solve_pow(black_box(ch), POW_DIFFICULTY));
            }
        });
    });
    // The reference clients' way: format the nonce, hash the whole string, format hex, compare.
    g.bench_function("naive", |b| {
        b.iter(|| {
            for ch in &challenges {
                black_box(naive_solve_pow(black_box(ch), POW_DIFFICULTY));
            }
        });
    });
    g.finish();
}

fn ring_solve_pow(challenge: &str, difficulty: u32) -> u64 {
    let mut prefix = digest::Context::new(&digest::SHA256);
    prefix.update(challenge.as_bytes());
    let mut itoa = [0u8; 20];
    (0u64..)
        .find(|&i| {
            let mut h = prefix.clone();
            h.update(decimal(i, &mut itoa));
            leading_zero_nibbles(h.finish().as_ref(), difficulty)
        })
        .expect("the counter space is unbounded")
}

fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

fn naive_solve_pow(challenge: &str, difficulty: u32) -> u64 {
    let zeros = "0".repeat(difficulty as usize);
    (0u64..)
        .find(|i| to_hex(&Sha256::digest(format!("{challenge}{i}").as_bytes())).starts_with(&zeros))
        .expect("the counter space is unbounded")
}

// ---------------------------------------------------------------- call signalling

const SDP_LINE: &str = "a=candidate:842163049 1 udp 1677729535 203.0.113.7 46154 typ srflx raddr 10.0.0.2 rport 46154 generation 0\r\n";

/// A `call_offer` inner object without `_sig` (§3.4), with a ~1.5 KB SDP.
fn call_offer_inner() -> Map<String, Value> {
    let mut m = Map::new();
    let sdp = format!(
        "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\n{}",
        SDP_LINE.repeat(13)
    );
    for (k, v) in [
        ("type", Value::from("call_offer")),
        (
            "call_id",
            Value::from("5f0c6a1e-8b7d-4e2a-9c3f-1d2e3f4a5b6c"),
        ),
        ("from", Value::from("alice_01")),
        ("sdp", Value::from(sdp)),
        ("sdp_type", Value::from("offer")),
        ("mode", Value::from("video")),
        ("_ts", Value::from(1_767_225_600_000_u64)),
        ("_nonce", Value::from("0123456789abcdef0123456789abcdef")),
    ] {
        m.insert(k.to_owned(), v);
    }
    m
}

/// Sign (§3.5: sorted keys, no whitespace; serde_json's default map is sorted by key bytes) and
/// encrypt (§4.4) one inner object; `sign` and `seal` pick the implementation.
fn signal_seal(
    inner: &Map<String, Value>,
    sign: impl FnOnce(&[u8]) -> [u8; 64],
    seal: impl FnOnce(&[u8]) -> Vec<u8>,
) -> String {
    let canonical = serde_json::to_string(inner).expect("JSON of a map");
    let mut signed = inner.clone();
    signed.insert(
        "_sig".to_owned(),
        Value::from(to_hex(&sign(canonical.as_bytes()))),
    );
    let pt = serde_json::to_string(&signed).expect("JSON of a map");
    to_base64(&seal(pt.as_bytes()))
}

/// Decrypt, parse, strip `_sig`, re-canonicalise and verify.
fn signal_open(
    payload: &str,
    open: impl FnOnce(&[u8]) -> Vec<u8>,
    verify: impl FnOnce(&[u8], &[u8; 64]) -> bool,
) -> Map<String, Value> {
    let pt = open(&from_base64(payload).expect("base64"));
    let mut inner: Map<String, Value> = serde_json::from_slice(&pt).expect("JSON object");
    let sig = match inner.remove("_sig") {
        Some(Value::String(s)) => from_hex_array::<64>(&s).expect("128 hex chars"),
        _ => panic!("signal without _sig"),
    };
    let canonical = serde_json::to_string(&inner).expect("JSON of a map");
    assert!(verify(canonical.as_bytes(), &sig), "signal signature");
    inner
}

fn call_signal(c: &mut Criterion) {
    let session = seed(13);
    let ours = SigningKeyPair::from_private_bytes(&seed(14));
    let ours_pk = ours.public_key();
    let theirs = ring_ed25519(&seed(14));
    let inner = call_offer_inner();
    let mut ivs = IvCounter::default();
    let payload = signal_seal(&inner, |m| ours.sign(m), |p| rc_seal(&session, &[5; 12], p));

    // TODO(client-core): switch to `client_core::crypto::signal` when it lands.
    let mut g = c.benchmark_group("primitive/call_signal_sign");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            signal_seal(
                black_box(&inner),
                |m| ours.sign(m),
                |p| rc_seal(&session, &ivs.next_iv(), p),
            )
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            signal_seal(
                black_box(&inner),
                |m| {
                    theirs
                        .sign(m)
                        .as_ref()
                        .try_into()
                        .expect("64-byte signature")
                },
                |p| ring_seal(&session, &ivs.next_iv(), p),
            )
        });
    });
    g.finish();

    let mut g = c.benchmark_group("primitive/call_signal_verify");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            signal_open(
                black_box(&payload),
                |d| rc_open(&session, d),
                |m, s| keys::verify_signature(&ours_pk, m, s).is_ok(),
            )
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            signal_open(
                black_box(&payload),
                |d| ring_open(&session, d),
                |m, s| {
                    signature::UnparsedPublicKey::new(&signature::ED25519, &ours_pk)
                        .verify(m, s)
                        .is_ok()
                },
            )
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- JWT (relay)

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Claims {
    sub: String,
    jti: String,
    iat: u64,
    exp: u64,
}

/// PKCS#8 v1 prefix of an Ed25519 private key (RFC 8410), as relay-core's token module uses.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
const JWT_HEADER_B64: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJFZERTQSJ9";

fn claims() -> Claims {
    Claims {
        sub: "2b0f5c3e-9a7d-4e61-8c2b-5f1a3d9e7b40".to_owned(),
        jti: "8d3e1f0a6b2c4d5e".to_owned(),
        iat: 1_767_225_600,
        exp: 1_767_225_600 + 7 * 86_400,
    }
}

fn jwt(c: &mut Criterion) {
    use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
    let key_seed = seed(15);
    let public = SigningKeyPair::from_private_bytes(&key_seed).public_key();
    let der = [PKCS8_ED25519_PREFIX.as_slice(), &key_seed].concat();
    let enc = EncodingKey::from_ed_der(&der);
    let dec = DecodingKey::from_ed_der(&public);
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.validate_exp = false;
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "sub"]);
    let header = Header::new(Algorithm::EdDSA);
    let theirs = ring_ed25519(&key_seed);
    let claims = claims();
    let token = jsonwebtoken::encode(&header, &claims, &enc).expect("JWT");

    // TODO(relay-core): switch to the relay's public issue/verify when it exposes them (the token
    // keys are crate-private today); this mirrors `relay_core::token::TokenKeys`.
    let mut g = c.benchmark_group("primitive/jwt_issue");
    g.bench_function("jsonwebtoken", |b| {
        b.iter(|| jsonwebtoken::encode(&header, black_box(&claims), &enc).expect("JWT"));
    });
    // ring: the same compact JWS by hand (header, claims JSON, base64url, Ed25519).
    g.bench_function("ring", |b| {
        b.iter(|| {
            let body = serde_json::to_vec(black_box(&claims)).expect("claims JSON");
            let mut t = format!("{JWT_HEADER_B64}.{}", URL_SAFE_NO_PAD.encode(body));
            let sig = URL_SAFE_NO_PAD.encode(theirs.sign(t.as_bytes()));
            t.push('.');
            t.push_str(&sig);
            t
        });
    });
    g.finish();

    let mut g = c.benchmark_group("primitive/jwt_verify");
    g.bench_function("jsonwebtoken", |b| {
        b.iter(|| {
            jsonwebtoken::decode::<Claims>(black_box(&token), &dec, &validation)
                .expect("valid JWT")
                .claims
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let t = black_box(&token);
            let (signed, sig) = t.rsplit_once('.').expect("three parts");
            let (_, body) = signed.split_once('.').expect("three parts");
            let sig = URL_SAFE_NO_PAD.decode(sig).expect("base64url signature");
            signature::UnparsedPublicKey::new(&signature::ED25519, &public)
                .verify(signed.as_bytes(), &sig)
                .expect("valid JWT");
            let body = URL_SAFE_NO_PAD.decode(body).expect("base64url claims");
            serde_json::from_slice::<Claims>(&body).expect("claims JSON")
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- harness

fn machine(_: &mut Criterion) {
    println!("{}", MachineInfo::detect());
}

fn config() -> Criterion {
    // Short settings so a full run stays within a few minutes; CLI flags still override them.
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = crypto;
    config = config();
    targets = machine, ed25519, key_agreement, hashes, identity, aes_gcm_raw, payload, media,
        call_frame, security_code, pow, call_signal, jwt
}
criterion_main!(crypto);
