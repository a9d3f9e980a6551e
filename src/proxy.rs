//! Who is on the other end of a request: the TCP peer, or, when that peer is one of
//! `[server] trusted_proxies`, the client it forwards for (`Fly-Client-IP`, `X-Forwarded-For`)
//! and the scheme that client used (`X-Forwarded-Proto`). Anyone else's forwarding headers are
//! ignored: they are just text a client can write.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use actix_web::HttpRequest;

/// An address block, `10.0.0.0/8` or `fdaa::/16`; a bare address is a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let net: IpAddr = addr.parse().map_err(|_| {
            format!("{text:?} is not an IP address or CIDR block (e.g. \"10.0.0.0/8\")")
        })?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?,
        };
        Ok(Cidr {
            net: canonical(net),
            prefix,
        })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `::ffff:10.0.0.1` is `10.0.0.1`: a dual-stack listener reports IPv4 peers that way.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The client of a request as far as it can be believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    pub ip: IpAddr,
    /// The client reached us over TLS (said by a trusted proxy; we do not terminate TLS).
    pub https: bool,
}

/// `[server] trusted_proxies`, parsed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// Parses every block; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(blocks: &[S]) -> Result<Self, String> {
        blocks
            .iter()
            .map(|b| Cidr::parse(b.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client of `req` (see [`TrustedProxies::resolve`]).
    pub fn client(&self, req: &HttpRequest) -> Client {
        let peer = req
            .peer_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let headers = req.headers();
        let text = |name: &str| -> Vec<&str> {
            headers
                .get_all(name)
                .filter_map(|v| v.to_str().ok())
                .collect()
        };
        self.resolve(
            peer,
            text("fly-client-ip").first().copied(),
            &text("x-forwarded-for"),
            text("x-forwarded-proto").first().copied(),
        )
    }

    /// The client behind `peer`. An untrusted peer is the client, whatever it sends. A trusted
    /// one is believed: `Fly-Client-IP` first (Fly's proxy sets it and overwrites a client's),
    /// unless that address is itself a trusted proxy (another proxy in front of Fly's); then
    /// `X-Forwarded-For` from the right, skipping trusted hops, so entries a client wrote on
    /// the left are never reached while a hop we do not trust stands between.
    pub fn resolve(
        &self,
        peer: IpAddr,
        fly_client_ip: Option<&str>,
        forwarded_for: &[&str],
        forwarded_proto: Option<&str>,
    ) -> Client {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return Client {
                ip: peer,
                https: false,
            };
        }
        let https = forwarded_proto
            .and_then(|p| p.split(',').next())
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
        if let Some(ip) = fly_client_ip.and_then(|v| v.trim().parse::<IpAddr>().ok())
            && !self.trusts(ip)
        {
            return Client {
                ip: canonical(ip),
                https,
            };
        }
        let mut ip = peer;
        for hop in forwarded_for.iter().rev().flat_map(|h| h.rsplit(',')) {
            // A hop that is not an address ends the walk at the last one we could read.
            let Ok(hop) = hop.trim().parse::<IpAddr>() else {
                break;
            };
            ip = canonical(hop);
            if !self.trusts(ip) {
                break;
            }
        }
        Client { ip, https }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether `listen` (`host:port`) binds only the loopback interface.
pub fn is_loopback(listen: &str) -> bool {
    listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback())
}

/// The block a login limiter counts an address in: the address itself for IPv4, its /64 for
/// IPv6 (one subscriber usually holds a whole /64).
pub fn limiter_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn blocks_parse_and_contain() {
        let c = Cidr::parse("10.0.0.0/8").expect("v4");
        assert!(c.contains(ip("10.255.1.2")) && !c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "mapped IPv4");
        let one = Cidr::parse("192.168.1.7").expect("single");
        assert!(one.contains(ip("192.168.1.7")) && !one.contains(ip("192.168.1.8")));
        let v6 = Cidr::parse("fdaa::/16").expect("v6");
        assert!(v6.contains(ip("fdaa:0:1::3")) && !v6.contains(ip("fdab::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .expect("all")
                .contains(ip("8.8.8.8"))
        );
        for bad in [
            "10.0.0.0/33",
            "fdaa::/129",
            "nope",
            "10.0.0/8",
            "10.0.0.0/x",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_trusted_peer_is_believed() {
        let t = TrustedProxies::parse(&["172.16.0.0/12"]).expect("parse");
        let forged = t.resolve(
            ip("203.0.113.9"),
            Some("1.2.3.4"),
            &["5.6.7.8"],
            Some("https"),
        );
        assert_eq!(
            forged,
            Client {
                ip: ip("203.0.113.9"),
                https: false
            }
        );
        let fly = t.resolve(
            ip("172.19.0.1"),
            Some("198.51.100.4"),
            &["1.1.1.1, 198.51.100.4, 66.241.124.10"],
            Some("https"),
        );
        assert_eq!(
            fly,
            Client {
                ip: ip("198.51.100.4"),
                https: true
            }
        );
        // Without Fly-Client-IP: the rightmost hop that is not a trusted proxy.
        let xff = t.resolve(
            ip("172.19.0.1"),
            None,
            &["6.6.6.6, 198.51.100.4", "172.16.0.9"],
            None,
        );
        assert_eq!(xff.ip, ip("198.51.100.4"));
        assert!(!xff.https);
        // A garbage hop stops the walk at the last readable one.
        assert_eq!(
            t.resolve(ip("172.19.0.1"), None, &["x, 172.16.0.9"], None)
                .ip,
            ip("172.16.0.9")
        );
        // A trusted peer without forwarding headers is the client itself.
        assert_eq!(
            t.resolve(ip("172.19.0.1"), None, &[], None).ip,
            ip("172.19.0.1")
        );
        // No trusted proxies: every header is ignored.
        let none = TrustedProxies::default();
        assert_eq!(
            none.resolve(
                ip("127.0.0.1"),
                Some("1.2.3.4"),
                &["5.6.7.8"],
                Some("https")
            ),
            Client {
                ip: ip("127.0.0.1"),
                https: false
            }
        );
    }

    #[test]
    fn loopback_and_limiter_keys() {
        assert!(is_loopback("127.0.0.1:8080") && is_loopback("[::1]:0"));
        assert!(!is_loopback("0.0.0.0:8080") && !is_loopback("10.0.0.5:80"));
        assert_eq!(limiter_key(ip("10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(
            limiter_key(ip("2001:db8:1:2:aaaa::1")),
            limiter_key(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(
            limiter_key(ip("2001:db8:1:2::1")),
            limiter_key(ip("2001:db8:1:3::1"))
        );
    }
}
