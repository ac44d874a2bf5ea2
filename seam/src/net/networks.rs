//! Networks, not addresses: the key of every per-address bound.
//!
//! One IPv6 client holds a whole /64 (SLAAC and privacy addresses hand every host 2^64 of
//! them), and a client behind IPv4 may hold a block; a bound keyed on the exact address is no
//! bound for either. [`NetworkPrefixes`] maps a peer's address to its network: the address
//! with only its first `v4` (IPv4) or `v6` (IPv6) bits kept, IPv4 /32 and IPv6 /64 by default.
//! An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`, a dual-stack listener's view of an IPv4
//! client) counts as the IPv4 address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Default of [`NetworkPrefixes::v4`]: one IPv4 address is one network.
pub const IPV4_PREFIX: u8 = 32;
/// Default of [`NetworkPrefixes::v6`]: the /64 one IPv6 host or site is given.
pub const IPV6_PREFIX: u8 = 64;
/// Shortest accepted IPv4 prefix: shorter would put unrelated providers' clients together.
pub const MIN_IPV4_PREFIX: u8 = 8;
/// Shortest accepted IPv6 prefix.
pub const MIN_IPV6_PREFIX: u8 = 16;

/// How many leading bits of a peer's address name its network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetworkPrefixes {
    v4: u8,
    v6: u8,
}

/// A prefix length out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{family} prefix /{given} is out of range (/{min} to /{max})")]
pub struct PrefixError {
    /// `IPv4` or `IPv6`.
    pub family: &'static str,
    /// The length given.
    pub given: u8,
    /// The shortest accepted.
    pub min: u8,
    /// The longest accepted (the whole address).
    pub max: u8,
}

impl Default for NetworkPrefixes {
    fn default() -> Self {
        Self {
            v4: IPV4_PREFIX,
            v6: IPV6_PREFIX,
        }
    }
}

impl NetworkPrefixes {
    /// IPv4 addresses keep their first `v4` bits ([`MIN_IPV4_PREFIX`]..=32), IPv6 ones their
    /// first `v6` ([`MIN_IPV6_PREFIX`]..=128).
    pub fn new(v4: u8, v6: u8) -> Result<Self, PrefixError> {
        let check = |family, given, min, max| {
            if (min..=max).contains(&given) {
                Ok(())
            } else {
                Err(PrefixError {
                    family,
                    given,
                    min,
                    max,
                })
            }
        };
        check("IPv4", v4, MIN_IPV4_PREFIX, 32)?;
        check("IPv6", v6, MIN_IPV6_PREFIX, 128)?;
        Ok(Self { v4, v6 })
    }

    /// The IPv4 prefix length.
    pub fn v4(&self) -> u8 {
        self.v4
    }

    /// The IPv6 prefix length.
    pub fn v6(&self) -> u8 {
        self.v6
    }

    /// The network of `ip`: its first bits kept, the rest zero.
    pub fn network(&self, ip: IpAddr) -> Network {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.v4)).unwrap_or(0);
                Network {
                    base: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)),
                    len: self.v4,
                }
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.v6)).unwrap_or(0);
                Network {
                    base: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)),
                    len: self.v6,
                }
            }
        }
    }
}

/// A network: its first address and its prefix length (`2001:db8:1:2::/64`, `203.0.113.7/32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Network {
    base: IpAddr,
    len: u8,
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(p: &NetworkPrefixes, ip: &str) -> String {
        p.network(ip.parse().unwrap()).to_string()
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_an_ipv4_host_its_address_by_default() {
        let p = NetworkPrefixes::default();
        assert_eq!(net(&p, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            net(&p, "2001:db8:1:2:ffff:ffff:ffff:ffff"),
            "2001:db8:1:2::/64"
        );
        assert_eq!(net(&p, "2001:db8:1:3::1"), "2001:db8:1:3::/64");
        assert_eq!(net(&p, "203.0.113.7"), "203.0.113.7/32");
        assert_eq!(net(&p, "::ffff:203.0.113.7"), "203.0.113.7/32");
    }

    #[test]
    fn prefixes_are_configurable_within_their_range() {
        let p = NetworkPrefixes::new(24, 48).unwrap();
        assert_eq!(net(&p, "203.0.113.7"), "203.0.113.0/24");
        assert_eq!(net(&p, "127.0.0.200"), "127.0.0.0/24");
        assert_eq!(net(&p, "2001:db8:1:2::1"), "2001:db8:1::/48");
        let whole = NetworkPrefixes::new(32, 128).unwrap();
        assert_eq!(net(&whole, "2001:db8::7"), "2001:db8::7/128");
        let wide = NetworkPrefixes::new(8, 16).unwrap();
        assert_eq!(net(&wide, "10.1.2.3"), "10.0.0.0/8");
        assert_eq!(net(&wide, "2001:db8::1"), "2001::/16");
        let e = NetworkPrefixes::new(33, 64).unwrap_err();
        assert_eq!(e.to_string(), "IPv4 prefix /33 is out of range (/8 to /32)");
        assert!(NetworkPrefixes::new(7, 64).is_err());
        assert!(NetworkPrefixes::new(32, 129).is_err());
        assert!(NetworkPrefixes::new(32, 15).is_err());
    }
}
