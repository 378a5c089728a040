package isolation

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/units"
)

// Egress is the network a policy asks for: none at all, or the hosts the
// sandbox's egress proxy may reach (package egress, docs/egress.md). Its
// zero value is no network but the sandbox's own loopback.
type Egress struct {
	// Allow is the --allow-host list.
	Allow egress.Allowlist
	// Credentials are the --credential routes, each of which allows its
	// host through the route alone. They name where a value comes from,
	// never the value.
	Credentials []egress.Credential
	// Bytes caps what the proxy moves, both ways and over all of the
	// sandbox's connections, for its whole life (--egress-limit); zero is
	// DefaultEgressBytes, which WithDefaults fills in for an egress that is
	// on.
	Bytes units.Bytes
}

// DefaultEgressBytes is a sandbox's egress byte cap when none is asked
// for: the proxy's own.
const DefaultEgressBytes = units.Bytes(egress.DefaultBytes)

// On says whether the sandbox is given a way out: an allowlist or a
// credential route.
func (e Egress) On() bool { return !e.Allow.Empty() || len(e.Credentials) > 0 }

// EgressRecord is a policy's egress as its record shows it.
type EgressRecord struct {
	// AllowHost is the allowlist, HOST[:PORT] each.
	AllowHost []string `json:"allow_host"`
	// Credentials are the credential routes as HOST:PORT HEADER: never
	// where their values come from, nor the values.
	Credentials []string `json:"credentials"`
	// LimitBytes caps the bytes the proxy moves for the sandbox.
	LimitBytes int64 `json:"limit_bytes"`
}

// Record is e as the policy's record shows it; nil when e is off, so a
// policy without a network records as it always has.
func (e Egress) Record() *EgressRecord {
	if !e.On() {
		return nil
	}
	r := &EgressRecord{AllowHost: e.Allow.Entries(), Credentials: []string{}, LimitBytes: int64(cmp.Or(e.Bytes, DefaultEgressBytes))}
	for _, c := range e.Credentials {
		port := c.Port
		if port == 0 {
			port = 443
		}
		r.Credentials = append(r.Credentials, c.Host+":"+strconv.Itoa(int(port))+" "+c.Header)
	}
	return r
}

// refuseEgress is a conversion's refusal of a policy whose egress it
// cannot give: the sandbox never gets more network than asked, nor less
// without saying so.
func refuseEgress(p Policy, what string) error {
	if !p.Egress.On() {
		return nil
	}
	return fmt.Errorf("%w: egress (--allow-host, --credential): %s", ErrInvalid, what)
}
