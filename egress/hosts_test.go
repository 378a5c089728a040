package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/pkitest"
)

func TestParseHosts(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Hosts
		err      string
	}{
		{"empty", "# nothing\n\n", Hosts{}, ""},
		{"names", "127.0.0.1 Mirror.Lab. mirror2 # a comment\n10.0.0.1 mirror.lab\n::ffff:10.0.0.2 v4mapped.lab\n", Hosts{
			"mirror.lab":   {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.1")},
			"mirror2":      {netip.MustParseAddr("127.0.0.1")},
			"v4mapped.lab": {netip.MustParseAddr("10.0.0.2")},
		}, ""},
		{"not an address", "mirror.lab 127.0.0.1\n", nil, `line 1: "mirror.lab" is not an IP address`},
		{"zone", "fe80::1%eth0 a.lab\n", nil, "line 1"},
		{"no name", "\n127.0.0.1\n", nil, "line 2: 127.0.0.1 has no name"},
		{"bad name", "127.0.0.1 a..lab\n", nil, `line 1: "a..lab"`},
		{"address as name", "127.0.0.1 127.1\n", nil, `line 1: "127.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHosts(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseHosts: %v; want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if !slices.Equal(got[k], v) {
					t.Errorf("%s: got %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// A pinned name answers from the file, in any case and with a final dot;
// any other goes to the next resolver.
func TestHostsResolver(t *testing.T) {
	h := Hosts{"mirror.lab": {netip.MustParseAddr("192.0.2.1")}}
	var asked []string
	next := func(_ context.Context, host string) ([]netip.Addr, error) {
		asked = append(asked, host)
		return nil, errors.New("no such host")
	}
	r := h.Resolver(next)
	for _, name := range []string{"mirror.lab", "MIRROR.lab."} {
		got, err := r(context.Background(), name)
		if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.1") {
			t.Errorf("%s: %v, %v", name, got, err)
		}
	}
	if _, err := r(context.Background(), "other.lab"); err == nil || !slices.Equal(asked, []string{"other.lab"}) {
		t.Errorf("other.lab: %v, asked %v; want the next resolver's answer", err, asked)
	}
}

// TestResolverRooted: the host's resolver is asked for rooted names, so
// that its search list and ndots cannot make an allowed name another
// ("x.example.org.corp.example"); a pinned name is still the pins'.
func TestResolverRooted(t *testing.T) {
	var asked []string
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		asked = append(asked, network+" "+host)
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	}
	r := Hosts{"mirror.lab": {netip.MustParseAddr("192.0.2.2")}}.Resolver(rooted(lookup))
	for _, name := range []string{"x.example.org", "mirror", "x.example.org.", "mirror.lab"} {
		if got, err := r(context.Background(), name); err != nil || len(got) != 1 {
			t.Errorf("%s: %v, %v", name, got, err)
		}
	}
	if want := []string{"ip x.example.org.", "ip mirror.", "ip x.example.org."}; !slices.Equal(asked, want) {
		t.Errorf("asked %q; want %q", asked, want)
	}
}

func TestLoadHosts(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("# padding\n", maxHostsBytes/10+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHosts(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a hosts file over the cap: %v", err)
	}
	if _, err := LoadHosts(dir); err == nil {
		t.Error("a directory as the hosts file: no error")
	}
	ok := filepath.Join(dir, "hosts")
	if err := os.WriteFile(ok, []byte("127.0.0.1 a.lab\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h, err := LoadHosts(ok); err != nil || len(h["a.lab"]) != 1 {
		t.Errorf("LoadHosts: %v, %v", h, err)
	}
}

func TestLoadRoots(t *testing.T) {
	dir := t.TempDir()
	pki := pkitest.New(t, "mirror.lab")
	ca, caPEM := pki.CA, pki.CAPEM
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := LoadRoots(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the bundle's CA is not in the pool: %v", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRoots(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a bundle without a certificate: %v", err)
	}
	if _, err := LoadRoots(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing bundle: no error")
	}
}
