//! The cluster key and what the nodes prove with it: that a link of crossings comes from a
//! node of the cluster ([`proof`]), and which client a request another node passed on is from
//! ([`forwarded`]). Each is an HMAC-SHA256 under the key of what it proves and the time, held
//! within [`PEER_PROOF_SKEW_S`] of the receiver's clock, compared in constant time.

use std::fmt;

use hmac::{KeyInit as _, Mac as _};

/// How far a proof's time may be from the receiving node's clock.
pub const PEER_PROOF_SKEW_S: u64 = 300;

/// The secret the nodes of a cluster prove they belong to it with. Never shown.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    /// A key from 32 secret bytes, the same on every node.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    fn mac(&self, node: &str, at_s: u64) -> String {
        self.mac_of(&format!("securechat cluster crossings v1|{node}|{at_s}"))
    }

    fn mac_of(&self, text: &str) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(text.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// The proof of a request passed on by node `node` at `at_s` for a client of network
    /// `client` (see [`super::onward`]).
    fn forward_mac(&self, node: &str, at_s: u64, client: &str) -> String {
        self.mac_of(&format!(
            "securechat cluster forwarded v1|{node}|{at_s}|{client}"
        ))
    }
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(<redacted>)")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `Authorization` value of node `node` at `at_s` (seconds since the epoch):
/// `Cluster <node> <at_s> <hex HMAC>`.
pub fn proof(key: &ClusterKey, node: &str, at_s: u64) -> String {
    format!("Cluster {node} {at_s} {}", key.mac(node, at_s))
}

/// The node a proof is from, if it holds at `now_s`.
pub(crate) fn verify(key: &ClusterKey, value: &str, now_s: u64) -> Option<String> {
    let mut parts = value.strip_prefix("Cluster ")?.split(' ');
    let (node, at, mac) = (parts.next()?, parts.next()?, parts.next()?);
    let at_s: u64 = at.parse().ok()?;
    if parts.next().is_some() || now_s.abs_diff(at_s) > PEER_PROOF_SKEW_S {
        return None;
    }
    same(&key.mac(node, at_s), mac).then(|| node.to_owned())
}

/// The `x-securechat-forwarded` value of a request node `node` passes on at `at_s` for a
/// client of network `client`: `<node> <at_s> <client> <hex HMAC>`.
pub(crate) fn forwarded(key: &ClusterKey, node: &str, at_s: u64, client: &str) -> String {
    format!(
        "{node} {at_s} {client} {}",
        key.forward_mac(node, at_s, client)
    )
}

/// The client's network a [`forwarded`] value carries, if it holds at `now_s`.
pub(crate) fn verify_forwarded(key: &ClusterKey, value: &str, now_s: u64) -> Option<String> {
    let mut parts = value.split(' ');
    let (node, at, client, mac) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let at_s: u64 = at.parse().ok()?;
    if parts.next().is_some() || now_s.abs_diff(at_s) > PEER_PROOF_SKEW_S {
        return None;
    }
    same(&key.forward_mac(node, at_s, client), mac).then(|| client.to_owned())
}

/// Whether two MACs are equal, compared in full whatever differs first: the time it takes
/// says nothing of the key.
fn same(expected: &str, mac: &str) -> bool {
    expected.len() == mac.len()
        && expected
            .bytes()
            .zip(mac.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_for_its_node_near_its_time_and_under_its_key_only() {
        let key = ClusterKey::new([7; 32]);
        let p = proof(&key, "n1", 1_000_000);
        assert_eq!(verify(&key, &p, 1_000_000).as_deref(), Some("n1"));
        assert_eq!(
            verify(&key, &p, 1_000_000 + PEER_PROOF_SKEW_S).as_deref(),
            Some("n1")
        );
        assert_eq!(verify(&key, &p, 1_000_000 + PEER_PROOF_SKEW_S + 1), None);
        assert_eq!(verify(&ClusterKey::new([8; 32]), &p, 1_000_000), None);
        let forged = p.replacen("n1", "n2", 1);
        assert_eq!(verify(&key, &forged, 1_000_000), None);
        for bad in [
            "",
            "Cluster",
            "Cluster n1",
            "Bearer x",
            &format!("{p} extra"),
        ] {
            assert_eq!(verify(&key, bad, 1_000_000), None, "{bad}");
        }
        assert!(!format!("{key:?}").contains('7'));
    }

    #[test]
    fn a_forwarded_value_carries_its_client_under_its_key_near_its_time_only() {
        let key = ClusterKey::new([7; 32]);
        let v = forwarded(&key, "n1", 1_000_000, "203.0.113.7/32");
        assert_eq!(
            verify_forwarded(&key, &v, 1_000_000 + PEER_PROOF_SKEW_S).as_deref(),
            Some("203.0.113.7/32")
        );
        assert_eq!(
            verify_forwarded(&key, &v, 1_000_000 + PEER_PROOF_SKEW_S + 1),
            None
        );
        assert_eq!(
            verify_forwarded(&ClusterKey::new([8; 32]), &v, 1_000_000),
            None
        );
        let other_client = v.replacen("203.0.113.7", "198.51.100.1", 1);
        assert_eq!(verify_forwarded(&key, &other_client, 1_000_000), None);
        // A crossings proof is not a forwarded value, nor the other way round.
        let p = proof(&key, "n1", 1_000_000);
        assert_eq!(verify_forwarded(&key, &p, 1_000_000), None);
        assert_eq!(verify(&key, &format!("Cluster {v}"), 1_000_000), None);
        for bad in ["", "n1", "n1 1000000", &format!("{v} extra")] {
            assert_eq!(verify_forwarded(&key, bad, 1_000_000), None, "{bad}");
        }
    }
}
