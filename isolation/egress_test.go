package isolation

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
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
	want := `{"allow_host":["pypi.org","*.pythonhosted.org:443"],"credentials":["api.example.com:443 Authorization"]}`
	if string(b) != want {
		t.Errorf("egress record %s, want %s", b, want)
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
// network it asked for: both refuse it, and the docker one names the
// engine that can.
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
