package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultPorts are the ports an entry without one allows.
var DefaultPorts = []uint16{443, 80}

// Rule is one allowlist entry: a name, a wildcard or an IP literal, with
// one port or the default ports.
type Rule struct {
	// Host is a lower-case name ("api.example.org"), or a wildcard
	// ("*.example.org", which matches every name below example.org but
	// not example.org itself); empty when Addr is set.
	Host string
	// Addr is an IP literal: exactly that address, loopback, private and
	// link-local ones included.
	Addr netip.Addr
	// Port is the one port allowed; 0 allows DefaultPorts.
	Port uint16
}

// Ports are the ports r allows.
func (r Rule) Ports() []uint16 {
	if r.Port == 0 {
		return DefaultPorts
	}
	return []uint16{r.Port}
}

// String is r as ParseRule reads it back.
func (r Rule) String() string {
	host := r.Host
	if r.Addr.IsValid() {
		host = r.Addr.String()
		if r.Addr.Is6() && r.Port != 0 {
			host = "[" + host + "]"
		}
	}
	if r.Port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(int(r.Port))
}

// matchesName says whether r's host pattern covers the name host.
func (r Rule) matchesName(host string) bool {
	if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return r.Host != "" && r.Host == host
}

// covers says whether every host r2 matches, r matches too.
func (r Rule) coversHost(r2 Rule) bool {
	if r.Addr.IsValid() || r2.Addr.IsValid() {
		return r.Addr.IsValid() && r.Addr == r2.Addr
	}
	if r2.Host[0] == '*' {
		// *.a.example.org is covered by *.example.org and by itself.
		return strings.HasPrefix(r.Host, "*") && strings.HasSuffix(r2.Host, r.Host[1:])
	}
	return r.matchesName(r2.Host)
}

// Allowlist is the hosts and ports a sandbox may reach. Its zero value
// allows nothing.
type Allowlist struct{ rules []Rule }

// ParseAllowlist reads --allow-host entries, HOST[:PORT] each. Every
// refused entry is an *Error, joined.
func ParseAllowlist(entries []string) (Allowlist, error) {
	var a Allowlist
	var errs []error
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(a.rules, r) {
			a.rules = append(a.rules, r)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Allowlist{}, err
	}
	return a, nil
}

const allowHost = "allow_host"

// ParseRule reads one entry: NAME, *.NAME, an IPv4 literal or an IPv6
// literal ([::1] when it has a port), with :PORT or without one.
func ParseRule(s string) (Rule, error) {
	host, port, err := splitHostPort(s)
	if err != nil {
		return Rule{}, refuse(allowHost, s, err.Error())
	}
	var r Rule
	if port != "" {
		p, err := parsePort(port)
		if err != nil {
			return Rule{}, refuse(allowHost, s, err.Error())
		}
		r.Port = p
	}
	if addr, ok, err := parseAddr(host); err != nil {
		return Rule{}, refuse(allowHost, s, err.Error())
	} else if ok {
		r.Addr = addr
		return r, nil
	}
	name, wild := strings.CutPrefix(host, "*.")
	if host == "*" || strings.Contains(name, "*") {
		return Rule{}, refuse(allowHost, s, `a wildcard is "*." before a name, such as "*.example.org"; "*" alone, or "*" anywhere else, is not allowed: name each host`)
	}
	name, err = normalizeName(name)
	if err != nil {
		return Rule{}, refuse(allowHost, s, err.Error())
	}
	if wild {
		if !strings.Contains(name, ".") {
			return Rule{}, refuse(allowHost, s, `a wildcard must stand below a name with a dot, such as "*.example.org", not a whole top-level domain`)
		}
		name = "*." + name
	}
	r.Host = name
	return r, nil
}

// splitHostPort splits HOST[:PORT]; an IPv6 literal with a port is in
// brackets, one without may be bare.
func splitHostPort(s string) (host, port string, err error) {
	if s == "" {
		return "", "", errors.New("give a host name, *.NAME or an IP address, with :PORT or without one")
	}
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", errors.New(`an IPv6 address in brackets needs its "]", such as "[2001:db8::1]:443"`)
		}
		if after == "" {
			return host, "", nil
		}
		port, ok := strings.CutPrefix(after, ":")
		if !ok {
			return "", "", errors.New(`after "]" give ":PORT" or nothing, such as "[2001:db8::1]:443"`)
		}
		return host, port, nil
	}
	if strings.Count(s, ":") > 1 {
		return s, "", nil // a bare IPv6 literal
	}
	host, port, _ = strings.Cut(s, ":")
	if strings.HasSuffix(s, ":") {
		return "", "", errors.New(`give a port after ":", such as "example.org:8443", or leave ":" out for ports 443 and 80`)
	}
	return host, port, nil
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 || s[0] == '0' || s[0] == '+' {
		return 0, fmt.Errorf("a port is a number from 1 to 65535 without leading zeros, such as 443; not %q", s)
	}
	return uint16(p), nil
}

// parseAddr reads host as an IP literal when it is one: ok says so. A
// literal with a zone, or a name shaped like an address in another form
// ("127.1", "0x7f.0.0.1", "2130706433"), is an error.
func parseAddr(host string) (netip.Addr, bool, error) {
	if strings.Contains(host, ":") {
		addr, err := netip.ParseAddr(host)
		if err != nil || addr.Zone() != "" {
			return netip.Addr{}, false, errors.New(`not an IPv6 address: give one such as "2001:db8::1" (no zone), in brackets when a port follows`)
		}
		return addr.Unmap(), true, nil
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr, true, nil
	}
	return netip.Addr{}, false, nil
}

// MaxNameLen is the longest host name, as DNS allows.
const MaxNameLen = 253

// normalizeName lower-cases a host name and drops one final dot. It takes
// letters, digits, '-' and '_' in labels of 1 to 63 bytes, and a last
// label starting with a letter, so that no address in an unusual form
// ("127.1", "0x7f.1") passes as a name.
func normalizeName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > MaxNameLen {
		return "", fmt.Errorf("a host name is 1 to %d characters, such as \"api.example.org\"", MaxNameLen)
	}
	name = strings.ToLower(name)
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", errors.New(`each dot-separated part of a host name is 1 to 63 characters, such as "api.example.org"`)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", errors.New(`a host name has letters, digits, '-' and '_' only; give an internationalized name in its ASCII form ("xn--…")`)
			}
		}
	}
	if last := labels[len(labels)-1]; last[0] < 'a' || last[0] > 'z' {
		return "", errors.New(`a host name's last part starts with a letter; give an IP address in its usual form, such as "192.0.2.1" or "2001:db8::1"`)
	}
	return name, nil
}

// Rules are a's entries.
func (a Allowlist) Rules() []Rule { return slices.Clone(a.rules) }

// Entries are a's entries as ParseAllowlist reads them back.
func (a Allowlist) Entries() []string {
	out := make([]string, len(a.rules))
	for i, r := range a.rules {
		out[i] = r.String()
	}
	return out
}

// Empty says whether a allows nothing.
func (a Allowlist) Empty() bool { return len(a.rules) == 0 }

// AllowsName says whether the name host (normalized: lower case, no final
// dot) may be asked for on port. It does not say the addresses it
// resolves to may be dialled: see Dialable.
func (a Allowlist) AllowsName(host string, port uint16) bool {
	return slices.ContainsFunc(a.rules, func(r Rule) bool {
		return r.matchesName(host) && slices.Contains(r.Ports(), port)
	})
}

// AllowsAddr says whether addr is on a as an IP literal with port.
func (a Allowlist) AllowsAddr(addr netip.Addr, port uint16) bool {
	addr = addr.Unmap()
	return slices.ContainsFunc(a.rules, func(r Rule) bool {
		return r.Addr.IsValid() && r.Addr == addr && slices.Contains(r.Ports(), port)
	})
}

// Dialable says whether the proxy may connect to addr on port: addr is a
// public address (Public), or a lists it exactly.
func (a Allowlist) Dialable(addr netip.Addr, port uint16) bool {
	return Public(addr) || a.AllowsAddr(addr, port)
}

// Narrow returns sub when every host and port it allows, a allows too: a
// run may remove hosts from a template's list, never add them. Otherwise
// it returns an *Error for each entry of sub that widens a, joined.
func (a Allowlist) Narrow(sub Allowlist) (Allowlist, error) {
	var errs []error
	for _, r := range sub.rules {
		for _, p := range r.Ports() {
			if !slices.ContainsFunc(a.rules, func(t Rule) bool { return t.coversHost(r) && slices.Contains(t.Ports(), p) }) {
				errs = append(errs, refuse(allowHost, r.String(), fmt.Sprintf("port %d of this host is not on the template's list (%s); a run may remove hosts, never add them", p, strings.Join(a.Entries(), ", "))))
				break
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Allowlist{}, err
	}
	return sub, nil
}
