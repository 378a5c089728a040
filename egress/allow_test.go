package egress

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"example.org", "example.org"},
		{"Example.ORG.", "example.org"},
		{"api.example.org:8443", "api.example.org:8443"},
		{"*.example.org", "*.example.org"},
		{"*.Example.org:443", "*.example.org:443"},
		{"127.0.0.1", "127.0.0.1"},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"::1", "::1"},
		{"[::1]", "::1"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[::ffff:127.0.0.1]:80", "127.0.0.1:80"},
		{"_srv.example.org", "_srv.example.org"},
	} {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if got := r.String(); got != tc.want {
			t.Errorf("ParseRule(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again, err := ParseRule(r.String()); err != nil || again != r {
			t.Errorf("ParseRule(%q) does not read back: %v, %v", r.String(), again, err)
		}
	}
}

func TestParseRuleRefuses(t *testing.T) {
	for _, tc := range []struct {
		in, says string
	}{
		{"", "give a host name"},
		{"*", `"*" alone`},
		{"*.org", "top-level"},
		{"a.*.example.org", "wildcard"},
		{"*example.org", "wildcard"},
		{"example.org:", "give a port"},
		{"example.org:0", "1 to 65535"},
		{"example.org:65536", "1 to 65535"},
		{"example.org:0443", "leading zeros"},
		{"example.org:+443", "1 to 65535"},
		{"example.org:https", "1 to 65535"},
		{"[::1", `"]"`},
		{"[::1]443", `":PORT"`},
		{"fe80::1%eth0", "no zone"},
		{"[fe80::1%25eth0]:443", "no zone"},
		{"127.1", "usual form"},
		{"0x7f.0.0.1", "usual form"},
		{"2130706433", "usual form"},
		{"bücher.example", "xn--"},
		{"a..example.org", "1 to 63"},
		{"exa mple.org", "letters, digits"},
		{"user@example.org", "letters, digits"},
		{"example.org/path", "letters, digits"},
		{strings.Repeat("a", 64) + ".org", "1 to 63"},
		{strings.Repeat("a.", 127) + "org", "1 to 253"},
	} {
		_, err := ParseRule(tc.in)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("ParseRule(%q): %v, want an *Error", tc.in, err)
			continue
		}
		if !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseRule(%q): %v is not invalid input", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseRule(%q) = %q, want it to say %q", tc.in, err, tc.says)
		}
		if !strings.HasPrefix(e.AsFlag(), "--allow-host ") {
			t.Errorf("AsFlag = %q", e.AsFlag())
		}
	}
}

func TestParseAllowlistJoinsErrors(t *testing.T) {
	_, err := ParseAllowlist([]string{"ok.example.org", "*", "x:0"})
	if err == nil || !strings.Contains(err.Error(), `"*"`) || !strings.Contains(err.Error(), `"x:0"`) {
		t.Fatalf("ParseAllowlist = %v, want both bad entries named", err)
	}
	a, err := ParseAllowlist([]string{"a.example.org", "A.example.org.", "a.example.org"})
	if err != nil || len(a.Rules()) != 1 {
		t.Fatalf("duplicates are kept once: %v, %v", a.Entries(), err)
	}
}

func mustAllow(t testing.TB, entries ...string) Allowlist {
	t.Helper()
	a, err := ParseAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAllowsName(t *testing.T) {
	a := mustAllow(t, "example.org", "*.pkg.example.net", "api.example.com:8443")
	for _, tc := range []struct {
		host string
		port uint16
		want bool
	}{
		{"example.org", 443, true},
		{"example.org", 80, true},
		{"example.org", 22, false},
		{"example.org", 8443, false},
		{"www.example.org", 443, false},
		{"pkg.example.net", 443, false},
		{"a.pkg.example.net", 443, true},
		{"a.b.pkg.example.net", 80, true},
		{"xpkg.example.net", 443, false},
		{"api.example.com", 8443, true},
		{"api.example.com", 443, false},
		{"evil.org", 443, false},
		{"example.org.evil.org", 443, false},
	} {
		if got := a.AllowsName(tc.host, tc.port); got != tc.want {
			t.Errorf("AllowsName(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	if (Allowlist{}).AllowsName("example.org", 443) {
		t.Error("the zero Allowlist allows a name")
	}
}

func TestAllowsAddrAndDialable(t *testing.T) {
	a := mustAllow(t, "127.0.0.1:8080", "::1", "example.org")
	for _, tc := range []struct {
		addr         string
		port         uint16
		listed, dial bool
	}{
		{"127.0.0.1", 8080, true, true},
		{"::ffff:127.0.0.1", 8080, true, true},
		{"127.0.0.1", 443, false, false},
		{"127.0.0.2", 8080, false, false},
		{"::1", 443, true, true},
		{"::1", 22, false, false},
		{"169.254.169.254", 80, false, false},
		{"10.0.0.1", 443, false, false},
		{"8.8.8.8", 443, false, true},
		{"2606:4700::1111", 443, false, true},
	} {
		addr := netip.MustParseAddr(tc.addr)
		if got := a.AllowsAddr(addr, tc.port); got != tc.listed {
			t.Errorf("AllowsAddr(%s, %d) = %v, want %v", addr, tc.port, got, tc.listed)
		}
		if got := a.Dialable(addr, tc.port); got != tc.dial {
			t.Errorf("Dialable(%s, %d) = %v, want %v", addr, tc.port, got, tc.dial)
		}
	}
}

func TestPublic(t *testing.T) {
	for _, s := range []string{
		"127.0.0.1", "127.255.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1",
		"169.254.169.254", "100.100.100.200", "168.63.129.16", "100.64.0.1", "0.0.0.0", "0.1.2.3",
		"255.255.255.255", "224.0.0.1", "192.0.2.1", "198.18.0.1", "240.0.0.1",
		"::", "::1", "fe80::1", "fd00:ec2::254", "fc00::1", "ff02::1",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1",
		"2002:7f00:1::", "2001::1", "2001:db8::1", "::7f00:1", "::ffff:0:7f00:1", "fec0::1",
	} {
		if Public(netip.MustParseAddr(s)) {
			t.Errorf("Public(%s) = true", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700::1111", "2a00:1450::1"} {
		if !Public(netip.MustParseAddr(s)) {
			t.Errorf("Public(%s) = false", s)
		}
	}
	if Public(netip.Addr{}) {
		t.Error("the zero Addr is public")
	}
}

func TestNarrow(t *testing.T) {
	tmpl := mustAllow(t, "example.org", "*.example.net", "api.example.com:8443", "127.0.0.1:8080")
	for _, tc := range []struct {
		sub  []string
		want string // empty: allowed
	}{
		{nil, ""},
		{[]string{"example.org"}, ""},
		{[]string{"example.org:443"}, ""},
		{[]string{"a.example.net", "*.b.example.net", "*.example.net:80"}, ""},
		{[]string{"api.example.com:8443", "127.0.0.1:8080"}, ""},
		{[]string{"example.org:22"}, "port 22"},
		{[]string{"www.example.org"}, "www.example.org"},
		{[]string{"example.net"}, "example.net"},
		{[]string{"*.example.org"}, "*.example.org"},
		{[]string{"api.example.com"}, "port 443"},
		{[]string{"127.0.0.1"}, "127.0.0.1"},
		{[]string{"127.0.0.2:8080"}, "127.0.0.2"},
		{[]string{"evil.org", "example.org"}, "evil.org"},
	} {
		sub := mustAllow(t, tc.sub...)
		got, err := tmpl.Narrow(sub)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Narrow(%v): %v", tc.sub, err)
		case tc.want == "" && !slices.Equal(got.Entries(), sub.Entries()):
			t.Errorf("Narrow(%v) = %v", tc.sub, got.Entries())
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errdefs.IsInvalidArgument(err)):
			t.Errorf("Narrow(%v) = %v, want an invalid-input error naming %q", tc.sub, err, tc.want)
		}
	}
}
