package seccomp

import (
	"encoding/json"
	"fmt"
	"slices"
)

// ForGVisor returns the variant of p that runsc applies as airlock asks.
//
// runsc's OCI seccomp support returns EPERM for every errno action,
// whatever errnoRet says. A clone3 rule that answers ENOSYS (so that libc
// falls back to clone, whose flags a filter can read) would then answer
// EPERM, and thread creation would fail. Under gVisor clone3 is served by
// the sentry, whose namespaces are its own, so the variant allows it; every
// other rule is unchanged.
func ForGVisor(p *Profile) (*Profile, error) {
	var doc map[string]any
	if err := json.Unmarshal(p.raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	groups, _ := doc["syscalls"].([]any)
	changed := false
	for _, g := range groups {
		rule, ok := g.(map[string]any)
		if !ok || rule["action"] != "SCMP_ACT_ERRNO" {
			continue
		}
		names, _ := rule["names"].([]any)
		if !slices.Contains(names, any("clone3")) {
			continue
		}
		if len(names) != 1 {
			return nil, fmt.Errorf("%w: clone3 shares an errno rule with other syscalls; give it a rule of its own", ErrInvalid)
		}
		rule["action"] = "SCMP_ACT_ALLOW"
		delete(rule, "errnoRet")
		rule["comment"] = "Under gVisor clone3 is served by the sentry; see seccomp.ForGVisor."
		changed = true
	}
	if !changed {
		return p, nil
	}
	b, err := json.MarshalIndent(doc, "", "\t")
	if err != nil {
		return nil, err
	}
	q, err := Parse(append(b, '\n'))
	if err != nil {
		return nil, err
	}
	q.name = p.name + "+gvisor"
	return q, nil
}
