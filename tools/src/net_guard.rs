//! The address guard of `web_fetch`: which IP addresses are not public (loopback, private,
//! link-local, unique-local, multicast, unspecified, reserved …, IPv4 and IPv6, including
//! IPv4 carried inside IPv6) and the `tools.fetch_allow` list that lets some through.
use crate::setup::ToolSetupError;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 ranges that are not global, most specific first, with what they are.
const V4_BLOCKED: &[(Ipv4Net, &str)] = &[
    (v4(0, 0, 0, 0, 32), "unspecified"),
    (v4(0, 0, 0, 0, 8), "reserved (\"this network\")"),
    (v4(10, 0, 0, 0, 8), "private"),
    (v4(100, 64, 0, 0, 10), "shared (carrier-grade NAT)"),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(169, 254, 0, 0, 16), "link-local"),
    (v4(172, 16, 0, 0, 12), "private"),
    (v4(192, 0, 0, 0, 24), "reserved (IETF protocol assignments)"),
    (v4(192, 0, 2, 0, 24), "documentation"),
    (v4(192, 88, 99, 0, 24), "reserved (6to4 relay)"),
    (v4(192, 168, 0, 0, 16), "private"),
    (v4(198, 18, 0, 0, 15), "benchmarking"),
    (v4(198, 51, 100, 0, 24), "documentation"),
    (v4(203, 0, 113, 0, 24), "documentation"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(255, 255, 255, 255, 32), "broadcast"),
    (v4(240, 0, 0, 0, 4), "reserved"),
];

/// IPv6 ranges that are not global, inside or beside 2000::/3 (the only global unicast
/// block); the IPv4-carrying ranges (mapped, NAT64, 6to4) are judged by their IPv4 address.
const V6_BLOCKED: &[(Ipv6Net, &str)] = &[
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "unique-local"),
    (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "site-local"),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
    (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "documentation"),
    (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "documentation"),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),
        "reserved (IETF protocol assignments)",
    ),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        "reserved (local NAT64)",
    ),
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "reserved (discard)"),
    (v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), "reserved (SRv6)"),
];

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix)
}

const fn v6(s: [u16; 8], prefix: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        prefix,
    )
}

/// What kind of non-global address `ip` is, or `None` when it is a public address.
pub(crate) fn non_global(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => V4_BLOCKED
            .iter()
            .find(|(net, _)| net.contains(&ip))
            .map(|(_, kind)| *kind),
        IpAddr::V6(ip) => {
            if let Some(v4) = embedded_v4(ip) {
                return non_global(IpAddr::V4(v4));
            }
            if let Some((_, kind)) = V6_BLOCKED.iter().find(|(net, _)| net.contains(&ip)) {
                return Some(kind);
            }
            let global_unicast = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);
            (!global_unicast.contains(&ip)).then_some("reserved")
        }
    }
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`), NAT64
/// (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`). A connection to one of these reaches
/// that IPv4 host, so it is judged as that host.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96).contains(&ip) {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// `tools.fetch_allow`: host names and networks `web_fetch` may reach although they are not
/// public.
#[derive(Clone, Debug, Default)]
pub(crate) struct FetchAllow {
    hosts: Vec<String>,
    nets: Vec<IpNet>,
}

impl FetchAllow {
    /// Each entry is a CIDR (`10.0.0.0/8`, `fd00::/8`), an IP address (`127.0.0.1`, `::1`,
    /// `[::1]`) or a host name (`intranet.example`, matched exactly, case-insensitively).
    pub(crate) fn parse(entries: &[String]) -> Result<Self, ToolSetupError> {
        let mut allow = Self::default();
        for entry in entries {
            let fail = |reason: &str| ToolSetupError::FetchAllow {
                entry: entry.clone(),
                reason: reason.to_owned(),
            };
            let text = entry.trim();
            if text.is_empty() {
                return Err(fail("it is empty"));
            }
            let bare = text
                .strip_prefix('[')
                .and_then(|t| t.strip_suffix(']'))
                .unwrap_or(text);
            if let Ok(net) = bare.parse::<IpNet>() {
                allow.nets.push(net);
            } else if let Ok(ip) = bare.parse::<IpAddr>() {
                allow.nets.push(IpNet::from(ip));
            } else if text.contains('/') {
                return Err(fail(
                    "a CIDR needs an IP address and a prefix length in range (at most 32 for IPv4, 128 for IPv6)",
                ));
            } else if text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            {
                allow.hosts.push(normalize_host(text));
            } else {
                return Err(fail(
                    "a host name holds only letters, digits, '-', '_' and '.' (no scheme, port or path)",
                ));
            }
        }
        Ok(allow)
    }

    pub(crate) fn allows_host(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.hosts.contains(&host)
    }

    pub(crate) fn allows_addr(&self, ip: IpAddr) -> bool {
        // An IPv4-mapped address is allowed when its IPv4 address is.
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.nets
            .iter()
            .any(|net| net.contains(&ip) || mapped.is_some_and(|m| net.contains(&m)))
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ip: &str) -> Option<&'static str> {
        non_global(ip.parse().unwrap())
    }

    #[test]
    fn r9_6_non_global_addresses_are_recognized() {
        let cases = [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("10.0.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "reserved (\"this network\")"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("198.18.0.1", "benchmarking"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fd12:3456::1", "unique-local"),
            ("fc00::1", "unique-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a00:1", "private"),
            ("2002:7f00:1::", "loopback"),
            ("::127.0.0.1", "reserved"),
            ("2001::1", "reserved (IETF protocol assignments)"),
        ];
        for (ip, expected) in cases {
            assert_eq!(kind(ip), Some(expected), "{ip}");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "172.32.0.1",
        ] {
            assert_eq!(kind(public), None, "{public}");
        }
    }

    #[test]
    fn r9_6_fetch_allow_lists_hosts_addresses_and_cidrs() {
        let entries: Vec<String> = ["127.0.0.1", "10.0.0.0/8", "[::1]", "Intranet.Example."]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let allow = FetchAllow::parse(&entries).unwrap();
        assert!(allow.allows_addr("127.0.0.1".parse().unwrap()));
        assert!(allow.allows_addr("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!allow.allows_addr("127.0.0.2".parse().unwrap()));
        assert!(allow.allows_addr("10.200.0.1".parse().unwrap()));
        assert!(allow.allows_addr("::1".parse().unwrap()));
        assert!(!allow.allows_addr("169.254.169.254".parse().unwrap()));
        assert!(allow.allows_host("intranet.example"));
        assert!(!allow.allows_host("other.example"));
    }
}
