package isolation

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// pinned are the rlimits every sandbox gets whatever the policy, written
// out here so that a change to the table shows.
var pinned = map[string]uint64{
	"RLIMIT_CORE":    0,
	"RLIMIT_MEMLOCK": 8 << 20,
	"RLIMIT_NICE":    0,
	"RLIMIT_RTPRIO":  0,
	"RLIMIT_RTTIME":  0,
}

func TestOCISpecPinsRlimits(t *testing.T) {
	seccompMode := Default()
	seccompMode.Isolation, seccompMode.Seccomp = Seccomp, testSeccomp
	for _, p := range []Policy{Default(), seccompMode} {
		s, err := OCISpec(p, testOCIJob)
		if err != nil {
			t.Fatal(err)
		}
		for typ, v := range pinned {
			var got []specs.POSIXRlimit
			for _, r := range s.Process.Rlimits {
				if r.Type == typ {
					got = append(got, r)
				}
			}
			if len(got) != 1 || got[0].Hard != v || got[0].Soft != v {
				t.Errorf("%s: %s is %+v, want one of %d", p.Isolation, typ, got, v)
			}
		}
	}
}

func TestCheckOCISpecRefusesRlimits(t *testing.T) {
	for typ, v := range pinned {
		for name, widen := range map[string]func([]specs.POSIXRlimit) []specs.POSIXRlimit{
			"missing": func(rl []specs.POSIXRlimit) []specs.POSIXRlimit {
				return slices.DeleteFunc(rl, func(r specs.POSIXRlimit) bool { return r.Type == typ })
			},
			"raised": func(rl []specs.POSIXRlimit) []specs.POSIXRlimit {
				i := slices.IndexFunc(rl, func(r specs.POSIXRlimit) bool { return r.Type == typ })
				if i < 0 {
					return append(rl, specs.POSIXRlimit{Type: typ, Hard: v + 1, Soft: v + 1})
				}
				rl[i].Hard, rl[i].Soft = v+1, v+1
				return rl
			},
			"soft raised": func(rl []specs.POSIXRlimit) []specs.POSIXRlimit {
				i := slices.IndexFunc(rl, func(r specs.POSIXRlimit) bool { return r.Type == typ })
				if i < 0 {
					return append(rl, specs.POSIXRlimit{Type: typ, Hard: v, Soft: v + 1})
				}
				rl[i].Soft = v + 1
				return rl
			},
			// The runtime applies every entry, so a later one wins.
			"raised again": func(rl []specs.POSIXRlimit) []specs.POSIXRlimit {
				return append(rl, specs.POSIXRlimit{Type: typ, Hard: math.MaxUint64, Soft: math.MaxUint64})
			},
		} {
			s, err := OCISpec(Default(), testOCIJob)
			if err != nil {
				t.Fatal(err)
			}
			s.Process.Rlimits = widen(s.Process.Rlimits)
			if err := CheckOCISpec(s, Default(), testOCIJob); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), typ) {
				t.Errorf("%s %s: err = %v, want ErrInvalid naming it", typ, name, err)
			}
		}
	}
}

// The docker engine gives dockerd the same rlimits, as ulimits.
func TestDockerConfigPinsRlimits(t *testing.T) {
	ulimit := func(h *container.HostConfig, typ string) *container.Ulimit {
		name := strings.ToLower(strings.TrimPrefix(typ, "RLIMIT_"))
		i := slices.IndexFunc(h.Ulimits, func(u *container.Ulimit) bool { return u.Name == name })
		if i < 0 {
			return nil
		}
		return h.Ulimits[i]
	}
	for typ, v := range pinned {
		cfg, host, _, err := DockerConfig(Default(), testJob)
		if err != nil {
			t.Fatal(err)
		}
		if u := ulimit(host, typ); u == nil || u.Hard != int64(v) || u.Soft != int64(v) {
			t.Errorf("%s: ulimit %+v, want %d", typ, u, v)
			continue
		}
		for name, widen := range map[string]func(*container.HostConfig){
			"missing": func(h *container.HostConfig) {
				u := ulimit(h, typ)
				h.Ulimits = slices.DeleteFunc(h.Ulimits, func(v *container.Ulimit) bool { return v == u })
			},
			"unlimited": func(h *container.HostConfig) { u := ulimit(h, typ); u.Hard, u.Soft = -1, -1 },
			"raised":    func(h *container.HostConfig) { u := ulimit(h, typ); u.Hard, u.Soft = int64(v)+1, int64(v)+1 },
		} {
			cfg, host, _, err := DockerConfig(Default(), testJob)
			if err != nil {
				t.Fatal(err)
			}
			widen(host)
			if err := CheckDockerConfig(cfg, host, Default(), testJob); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), typ) {
				t.Errorf("%s %s: err = %v, want ErrInvalid naming it", typ, name, err)
			}
		}
		if err := CheckDockerConfig(cfg, host, Default(), testJob); err != nil {
			t.Errorf("valid config refused: %v", err)
		}
	}
}
