package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// Hosts are names pinned to addresses, in the form of /etc/hosts, for the
// proxy's resolver alone: a lab's mirror under a name its DNS does not
// know, or a test's upstream. A pinned name still passes the allowlist
// first and its addresses the address rules (Public, or listed exactly).
type Hosts map[string][]netip.Addr

// maxHostsBytes caps a hosts file.
const maxHostsBytes = 1 << 20

// ParseHosts reads r in the form of /etc/hosts: an address, then its
// names, per line; '#' starts a comment. Names are compared as the
// allowlist compares them (lower case, no final dot); a name given on
// several lines has every address given for it, in order.
func ParseHosts(r io.Reader) (Hosts, error) {
	h := Hosts{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		addr, err := netip.ParseAddr(f[0])
		if err != nil || addr.Zone() != "" {
			return nil, fmt.Errorf("line %d: %q is not an IP address (give an address, then its names)", n, f[0])
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: %s has no name (give an address, then its names)", n, f[0])
		}
		for _, name := range f[1:] {
			norm, err := normalizeName(name)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q: %w", n, name, err)
			}
			h[norm] = append(h[norm], addr.Unmap())
		}
	}
	return h, sc.Err()
}

// LoadHosts reads the hosts file at path (at most 1 MiB).
func LoadHosts(path string) (Hosts, error) {
	b, err := readCapped(path, maxHostsBytes+1)
	if err != nil {
		return nil, fmt.Errorf("reading the egress hosts file: %w", err)
	}
	if len(b) > maxHostsBytes {
		return nil, fmt.Errorf("egress hosts file %s: larger than %d bytes", path, maxHostsBytes)
	}
	h, err := ParseHosts(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("egress hosts file %s: %w", path, err)
	}
	return h, nil
}

// Resolver answers the names in h from h, and every other name through
// next (the host's resolver when nil).
func (h Hosts) Resolver(next Resolver) Resolver {
	if next == nil {
		next = systemResolver
	}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := h[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
			return append([]netip.Addr(nil), a...), nil
		}
		return next(ctx, host)
	}
}

// maxCABytes caps a CA bundle.
const maxCABytes = 4 << 20

// LoadRoots returns the host's roots with the PEM certificates of the file
// at path added: the pool routes' hosts are verified against when a lab's
// hosts have certificates from its own CA (WithRootCAs). A file with no
// certificate is an error.
func LoadRoots(path string) (*x509.CertPool, error) {
	b, err := readCapped(path, maxCABytes+1)
	if err != nil {
		return nil, fmt.Errorf("reading the egress CA bundle: %w", err)
	}
	if len(b) > maxCABytes {
		return nil, fmt.Errorf("egress CA bundle %s: larger than %d bytes", path, maxCABytes)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("egress CA bundle " + path + ": no PEM certificate in it")
	}
	return pool, nil
}
