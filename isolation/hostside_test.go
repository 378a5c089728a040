package isolation

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/units"
)

// pidMaxLimit is the kernel's PID_MAX_LIMIT on 64-bit hosts: pids.max
// refuses anything above it.
const pidMaxLimit = 1 << 22

// Every pids value Validate accepts can be written to a cgroup on every
// engine: gVisor's host limit, plus the one a nested runtime cgroup adds.
func TestValidatePidsBound(t *testing.T) {
	for _, tc := range []struct {
		pids int64
		ok   bool
	}{
		{minPids, true},
		{MaxPids, true},
		{MaxPids + 1, false},
		{pidMaxLimit, false},
		{1 << 40, false},
	} {
		p := Default()
		p.Limits.Pids = tc.pids
		err := p.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("pids %d: err = %v, want ok=%v", tc.pids, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "between 8 and 32768") {
			t.Errorf("pids %d: error %q does not name the range", tc.pids, err)
		}
	}
	if h := GVisorHostPids(MaxPids) + 1; h > pidMaxLimit {
		t.Errorf("gVisor host pids %d at the maximum passes the kernel's %d", h, pidMaxLimit)
	}
}

// A timeout is at most a year: a longer one would overflow the deadline
// a run derives from it (timeout and a minute) into the past.
func TestValidateTimeoutBound(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		ok      bool
	}{
		{minTimeout, true},
		{MaxTimeout, true},
		{MaxTimeout + time.Nanosecond, false},
		{math.MaxInt64, false},
	} {
		p := Default()
		p.Limits.Timeout = tc.timeout
		err := p.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("timeout %v: err = %v, want ok=%v", tc.timeout, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "timeout") || !strings.Contains(err.Error(), "maximum of 8760h0m0s")) {
			t.Errorf("timeout %v: error %q is not invalid input naming the field and the maximum", tc.timeout, err)
		}
	}
}

// Every CPU limit Validate accepts is a CFS quota the kernel takes: at
// least 1 ms per 100 ms period, a hundredth of a CPU (Docker's minimum
// too). Less would pass here and fail as unavailable at cgroup creation.
func TestValidateCPUsBound(t *testing.T) {
	for _, tc := range []struct {
		cpus units.MilliCPUs
		ok   bool
	}{
		{0, false},
		{1, false},
		{9, false},
		{MinCPUs, true},
		{1000, true},
	} {
		p := Default()
		p.Limits.CPUs = tc.cpus
		err := p.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("cpus %v: err = %v, want ok=%v", tc.cpus, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "below the minimum of 0.01")) {
			t.Errorf("cpus %v: error %q is not invalid input naming the minimum", tc.cpus, err)
		}
	}
}

// A writable bind (the output directory) is never executable: a program
// must not run what it wrote there.
func TestOCIWritableBindsNoexec(t *testing.T) {
	j := testOCIJob
	j.Binds = tightOCIBinds
	s, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range s.Mounts {
		if m.Type != "bind" {
			continue
		}
		n++
		ro, noexec := slices.Contains(m.Options, "ro"), slices.Contains(m.Options, "noexec")
		if !ro && !noexec {
			t.Errorf("writable bind %s is executable: %v", m.Destination, m.Options)
		}
		if ro && noexec {
			t.Errorf("read-only input %s made noexec: %v", m.Destination, m.Options)
		}
	}
	if n != 2 {
		t.Fatalf("%d binds, want 2", n)
	}
	i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/work/out" })
	s.Mounts[i].Options = slices.DeleteFunc(s.Mounts[i].Options, func(o string) bool { return o == "noexec" })
	if err := CheckOCISpec(s, Default(), j); !errors.Is(err, ErrInvalid) {
		t.Errorf("executable writable bind: err = %v, want ErrInvalid", err)
	}
}

// Nothing in the image config that dockerd acts on survives: no health
// check runs inside the sandbox, a stop is a SIGKILL, and airlock's labels
// are always set, so an image label never takes their place.
func TestDockerConfigNeutralizesImageConfig(t *testing.T) {
	j := testJob
	j.Labels = map[string]string{"airlock.id": "r1", "airlock.owner": "", "airlock.deadline": "x"}
	cfg, host, _, err := DockerConfig(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Healthcheck == nil || !slices.Equal(cfg.Healthcheck.Test, []string{"NONE"}) {
		t.Errorf("healthcheck %+v, want NONE", cfg.Healthcheck)
	}
	if cfg.StopSignal != "SIGKILL" {
		t.Errorf("stop signal %q, want SIGKILL", cfg.StopSignal)
	}
	if cfg.User == "" || cfg.Entrypoint == nil || cfg.Cmd == nil || cfg.Env == nil {
		t.Errorf("user, entrypoint, cmd or env left for the image to fill: %+v", cfg)
	}
	if len(cfg.Volumes) != 0 || host.PublishAllPorts || len(host.PortBindings) != 0 || host.VolumeDriver != "" || len(host.VolumesFrom) != 0 {
		t.Errorf("volumes or ports: %+v %+v", cfg.Volumes, host)
	}
	if _, ok := host.Tmpfs["/tmp"]; !ok || len(host.Tmpfs) != 1 {
		t.Errorf("tmpfs %v", host.Tmpfs)
	}
}
