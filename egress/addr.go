package egress

import "net/netip"

// special are ranges that are not the public internet though netip calls
// them global unicast: shared address space (100.64.0.0/10, where some
// clouds keep their metadata service), documentation, benchmarking and
// reserved ranges, and IPv6 forms that carry an IPv4 address a gateway
// may translate to a private one (IPv4-compatible and -translated,
// NAT64, 6to4, Teredo), the deprecated site-local range, and Azure's
// platform address (WireServer and its metadata), public by number but
// reachable only from inside Azure.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("168.63.129.16/32"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.88.99.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/23"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("3fff::/20"),
	netip.MustParsePrefix("fec0::/10"),
}

// Public says whether addr is on the public internet: a global unicast
// address that is not private (10/8, 172.16/12, 192.168/16, fc00::/7),
// loopback, link-local (169.254/16, where the cloud metadata address
// 169.254.169.254 is, and fe80::/10), unspecified, multicast, or in one of
// the special ranges above. An IPv4-mapped IPv6 address is judged as its
// IPv4 address.
func Public(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.Zone() != "" || !addr.IsGlobalUnicast() || addr.IsPrivate() {
		return false
	}
	for _, p := range special {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}
