package isolation

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/opencontainers/runtime-spec/specs-go"
)

func testEgress(t *testing.T) Egress {
	t.Helper()
	allow, err := egress.ParseAllowlist([]string{"pypi.org", "*.pythonhosted.org:443"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := egress.ParseCredential("api.example.com=Authorization:@/run/secrets/key")
	if err != nil {
		t.Fatal(err)
	}
	return Egress{Allow: allow, Credentials: []egress.Credential{c}}
}

// A policy without egress records exactly as before (no "egress" key, so
// its hash is unchanged); one with egress records its hosts and routes,
// never where a credential's value comes from.
func TestEgressRecord(t *testing.T) {
	b, _ := json.Marshal(Default().Record())
	if strings.Contains(string(b), "egress") {
		t.Errorf("a policy without egress records one: %s", b)
	}
	p := Default()
	p.Egress = testEgress(t)
	b, _ = json.Marshal(p.Record().Egress)
	want := `{"allow_host":["pypi.org","*.pythonhosted.org:443"],"credentials":["api.example.com:443 Authorization"],"limit_bytes":1073741824}`
	if string(b) != want {
		t.Errorf("egress record %s, want %s", b, want)
	}
	p.Egress.Bytes = 4 << 30
	if r := p.Record().Egress; r.LimitBytes != 4<<30 {
		t.Errorf("egress record of a 4GiB limit: %+v", r)
	}
	if strings.Contains(string(b), "secrets") {
		t.Errorf("the record names a credential's source: %s", b)
	}
	if (Egress{}).On() || (Egress{}).Record() != nil {
		t.Error("the zero Egress is on")
	}
	only := Egress{Credentials: p.Egress.Credentials}
	if !only.On() {
		t.Error("a credential route alone is not egress")
	}
}

// Neither conversion gives a policy with egress a sandbox without the
// network it asked for: the docker one refuses it, naming the engine that
// can, and the OCI one refuses it without the network namespace made for
// it.
func TestConversionsRefuseEgress(t *testing.T) {
	p := Default()
	p.Seccomp = testSeccomp
	p.Egress = testEgress(t)
	if _, err := OCISpec(p, testOCIJob); !errors.Is(err, ErrInvalid) {
		t.Errorf("OCISpec with egress: %v", err)
	}
	_, _, _, err := DockerConfig(p, testJob)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--engine oci") {
		t.Errorf("DockerConfig with egress: %v", err)
	}
	p.Egress = Egress{}
	if _, err := OCISpec(p, testOCIJob); err != nil {
		t.Errorf("OCISpec without egress: %v", err)
	}
}

var testNetwork = &OCINetwork{NetNS: "/var/lib/airlock/oci/netns/sb-1.sandbox", Proxy: "http://169.254.0.1:3128"}

// A policy with egress and its namespace: the spec joins that namespace,
// as its network one and its only joined one, and every proxy variable
// names the proxy, the caller's and the image's overridden. The final
// check takes it, and refuses another path or a joined namespace of
// another type.
func TestOCISpecEgress(t *testing.T) {
	p := Default()
	p.Seccomp = testSeccomp
	p.Egress = testEgress(t)
	j := testOCIJob
	j.Env = append(slices.Clone(j.Env), "HTTP_PROXY=http://elsewhere:8080", "no_proxy=*")
	j.Network = testNetwork
	s, err := OCISpec(p, j)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range s.Linux.Namespaces {
		want := ""
		if ns.Type == specs.NetworkNamespace {
			want = testNetwork.NetNS
		}
		if ns.Path != want {
			t.Errorf("%s namespace at %q, want %q", ns.Type, ns.Path, want)
		}
	}
	for _, kv := range ProxyEnv(testNetwork.Proxy) {
		if !slices.Contains(s.Process.Env, kv) {
			t.Errorf("env lacks %s: %q", kv, s.Process.Env)
		}
	}
	for _, kv := range s.Process.Env {
		if strings.Contains(kv, "elsewhere") || kv == "no_proxy=*" {
			t.Errorf("env keeps %s", kv)
		}
	}
	if err := CheckOCISpec(s, p, j); err != nil {
		t.Errorf("final check: %v", err)
	}
	for name, netNS := range map[string]string{"no namespace allowed": "", "another namespace": "/run/netns/other"} {
		j := j
		j.Network = nil
		if netNS != "" {
			j.Network = &OCINetwork{NetNS: netNS, Proxy: testNetwork.Proxy}
		}
		if err := CheckOCISpec(s, p, j); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: final check took the spec: %v", name, err)
		}
	}
	for i := range s.Linux.Namespaces {
		if s.Linux.Namespaces[i].Type == specs.PIDNamespace {
			s.Linux.Namespaces[i].Path = testNetwork.NetNS
		}
	}
	if err := CheckOCISpec(s, p, j); !errors.Is(err, ErrInvalid) {
		t.Errorf("the egress path as a pid namespace: %v", err)
	}

	// A namespace for a policy without egress, or a bad one, is refused.
	p.Egress = Egress{}
	if _, err := OCISpec(p, j); !errors.Is(err, ErrInvalid) {
		t.Errorf("a network namespace without egress: %v", err)
	}
	p.Egress = testEgress(t)
	for _, n := range []OCINetwork{{NetNS: "relative", Proxy: testNetwork.Proxy}, {NetNS: testNetwork.NetNS, Proxy: "socks5://169.254.0.1:1080"}} {
		j.Network = &n
		if _, err := OCISpec(p, j); !errors.Is(err, ErrInvalid) {
			t.Errorf("network %+v: %v", n, err)
		}
	}
}

// runsc's flags change with egress only in --network.
func TestRunscNetwork(t *testing.T) {
	if got := RunscNetwork(RunscFlags(), Egress{}); !slices.Equal(got, RunscFlags()) {
		t.Errorf("without egress: %q", got)
	}
	flags := append(RunscFlags(), "--debug-log=/x")
	if got, want := RunscNetwork(flags, testEgress(t)), []string{"--network=sandbox", "--oci-seccomp", "--debug-log=/x"}; !slices.Equal(got, want) {
		t.Errorf("with egress: %q, want %q", got, want)
	}
	if flags[0] != "--network=none" {
		t.Error("RunscNetwork changed its argument")
	}
}

// An egress byte limit is filled in for an egress that is on, and refused
// without one, or below 1KiB, naming what to do.
func TestEgressLimit(t *testing.T) {
	p := Default()
	p.Seccomp = testSeccomp
	p.Egress = testEgress(t)
	if q := p.WithDefaults(); q.Egress.Bytes != DefaultEgressBytes {
		t.Errorf("default egress limit %v, want %v", q.Egress.Bytes, DefaultEgressBytes)
	}
	if q := Default().WithDefaults(); q.Egress.Bytes != 0 {
		t.Errorf("a policy without egress was given a limit: %v", q.Egress.Bytes)
	}
	p.Egress.Bytes = 4 << 30
	if q := p.WithDefaults(); q.Egress.Bytes != 4<<30 {
		t.Errorf("WithDefaults changed a limit given: %v", q.Egress.Bytes)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("a 4GiB limit: %v", err)
	}
	for _, c := range []struct {
		egress Egress
		want   string
	}{
		{Egress{Bytes: 1 << 20}, "allow a host"},
		{Egress{Allow: p.Egress.Allow, Bytes: 512}, "below the minimum of 1KiB"},
		{Egress{Allow: p.Egress.Allow, Bytes: -1}, "below the minimum"},
	} {
		q := p
		q.Egress = c.egress
		if err := q.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("egress %+v: %v, want %q", c.egress, err, c.want)
		}
	}
}
