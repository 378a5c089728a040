package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestSpaceStatus(t *testing.T) {
	for _, tc := range []struct {
		free uint64
		want string
	}{
		{0, StatusFail},
		{256<<20 - 1, StatusFail},
		{256 << 20, StatusWarn},
		{2<<30 - 1, StatusWarn},
		{2 << 30, StatusOK},
		{1 << 40, StatusOK},
	} {
		if got := spaceStatus(tc.free); got != tc.want {
			t.Errorf("spaceStatus(%d) = %s, want %s", tc.free, got, tc.want)
		}
	}
}

func TestSpaceCheck(t *testing.T) {
	for _, tc := range []struct {
		free           uint64
		status, detail string
		wantFix        bool
	}{
		{100 << 20, StatusFail, "100 MiB free in /r (under 256 MiB)", true},
		{1 << 30, StatusWarn, "1 GiB free in /r (under 2 GiB)", true},
		{70 << 30, StatusOK, "70 GiB free in /r", false},
	} {
		c := spaceCheck("/r", tc.free)
		if c.Name != "free space" || c.Status != tc.status || c.Detail != tc.detail || (c.Fix != "") != tc.wantFix {
			t.Errorf("spaceCheck(%d) = %+v, want status %s detail %q fix %v", tc.free, c, tc.status, tc.detail, tc.wantFix)
		}
	}
}

func TestHuman(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1 KiB"},
		{1536, "1.5 KiB"},
		{70<<30 + 300<<20, "70.3 GiB"},
		{64 << 20, "64 MiB"},
		{5 << 40, "5 TiB"},
		{3 << 50, "3 PiB"},
		{1 << 62, "4096 PiB"},
	} {
		if got := human(tc.n); got != tc.want {
			t.Errorf("human(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestOK(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []string
		want     bool
	}{
		{"none", nil, true},
		{"all ok", []string{StatusOK, StatusOK}, true},
		{"warnings only", []string{StatusOK, StatusWarn}, true},
		{"one failure", []string{StatusOK, StatusWarn, StatusFail}, false},
		{"unknown status is not a failure", []string{"skip"}, true},
	} {
		var checks []Check
		for _, s := range tc.statuses {
			checks = append(checks, Check{Name: "x", Status: s})
		}
		if got := OK(checks); got != tc.want {
			t.Errorf("%s: OK = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBad(t *testing.T) {
	if c := bad(true, "n", "d", "f"); c.Status != StatusFail || c.Fix != "f" {
		t.Errorf("needed: %+v", c)
	}
	if c := bad(false, "n", "d", "f"); c.Status != StatusWarn || c.Fix != "f" {
		t.Errorf("not needed: %+v", c)
	}
}

func TestHasField(t *testing.T) {
	status := []byte("Name:\tcat\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n")
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"Seccomp", true},
		{"Seccomp_filters", true},
		{"NoNewPrivs", true},
		{"Secc", false},
		{"CapEff", false},
	} {
		if got := hasField(status, tc.key); got != tc.want {
			t.Errorf("hasField(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

// A v1 host needs freezer and cpuacct besides, as the oci engine does.
func TestMissingControllers(t *testing.T) {
	v1 := append(slices.Clone(controllers), v1Controllers...)
	for _, tc := range []struct {
		need []string
		have []string
		want []string
	}{
		{controllers, []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}, nil},
		{controllers, []string{"cpu", "pids"}, []string{"memory"}},
		{controllers, nil, []string{"memory", "pids", "cpu"}},
		{v1, []string{"cpu", "memory", "pids"}, []string{"freezer", "cpuacct"}},
		{v1, []string{"cpu", "cpuacct", "memory", "pids", "freezer"}, nil},
	} {
		got := missingControllers(tc.need, func(c string) bool {
			for _, h := range tc.have {
				if h == c {
					return true
				}
			}
			return false
		})
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("have %v: missing %v, want %v", tc.have, got, tc.want)
		}
	}
}

const goodProbe = "net=ENETUNREACH\nroot_write=EACCES\nroot_ro=1\nCapEff=0000000000000000\nNoNewPrivs=1\nuid=65534\n"

func TestSandboxChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want []string // statuses of no network, read-only root, no capabilities
		hint string   // in some failing row's detail
	}{
		{"isolated", goodProbe, []string{StatusOK, StatusOK, StatusOK}, ""},
		// Only loopback answers ENETUNREACH at once: a refusal, an ICMP
		// from a router or a timeout each mean the sandbox has a route out.
		{"refused is a network", strings.Replace(goodProbe, "ENETUNREACH", "ECONNREFUSED", 1), []string{StatusFail, StatusOK, StatusOK}, "ECONNREFUSED, not ENETUNREACH"},
		{"host unreachable is a network", strings.Replace(goodProbe, "ENETUNREACH", "EHOSTUNREACH", 1), []string{StatusFail, StatusOK, StatusOK}, "EHOSTUNREACH, not ENETUNREACH"},
		{"timeout is a network", strings.Replace(goodProbe, "ENETUNREACH", "TimeoutError", 1), []string{StatusFail, StatusOK, StatusOK}, "TimeoutError, not ENETUNREACH"},
		{"network", strings.Replace(goodProbe, "net=ENETUNREACH", "net=connected", 1), []string{StatusFail, StatusOK, StatusOK}, "connected to 192.0.2.1:80"},
		{"writable root", strings.Replace(goodProbe, "root_write=EACCES", "root_write=ok", 1), []string{StatusOK, StatusFail, StatusOK}, "wrote a file"},
		{"root not read-only", strings.Replace(goodProbe, "root_ro=1", "root_ro=0", 1), []string{StatusOK, StatusFail, StatusOK}, "not mounted read-only"},
		{"capabilities", strings.Replace(goodProbe, "CapEff=0000000000000000", "CapEff=00000000a80425fb", 1), []string{StatusOK, StatusOK, StatusFail}, "CapEff is 00000000a80425fb"},
		{"new privileges", strings.Replace(goodProbe, "NoNewPrivs=1", "NoNewPrivs=0", 1), []string{StatusOK, StatusOK, StatusFail}, "NoNewPrivs is 0"},
		{"root user", strings.Replace(goodProbe, "uid=65534", "uid=0", 1), []string{StatusOK, StatusOK, StatusFail}, "uid is 0"},
		{"nothing printed", "", []string{StatusFail, StatusFail, StatusFail}, "printed no"},
		{"odd values are quoted", strings.Replace(goodProbe, "uid=65534", "uid=\x1b[2J", 1), []string{StatusOK, StatusOK, StatusFail}, `"\x1b[2J"`},
	} {
		got := sandboxChecks(parseProbe(tc.out))
		if len(got) != 3 {
			t.Fatalf("%s: %d rows", tc.name, len(got))
		}
		var statuses []string
		found := tc.hint == ""
		for _, c := range got {
			statuses = append(statuses, c.Status)
			if c.Status == StatusFail && c.Fix == "" {
				t.Errorf("%s: %s fails with no fix", tc.name, c.Name)
			}
			if tc.hint != "" && c.Status == StatusFail && strings.Contains(c.Detail, tc.hint) {
				found = true
			}
		}
		if !reflect.DeepEqual(statuses, tc.want) || !found {
			t.Errorf("%s: %+v, want statuses %v and a failure mentioning %q", tc.name, got, tc.want, tc.hint)
		}
	}
}

func TestLimitsCheck(t *testing.T) {
	o := Options{Engine: "oci", Isolation: "gvisor"}
	for _, tc := range []struct {
		name   string
		res    runner.Result
		err    error
		status string
		fix    string // in Fix
	}{
		{"oom", runner.Result{Reason: runner.ReasonOOM, ExitCode: 137}, nil, StatusOK, ""},
		{"survived", runner.Result{Reason: runner.ReasonExited}, nil, StatusFail, "cgroups"},
		{"timeout", runner.Result{Reason: runner.ReasonTimeout, ExitCode: 137}, nil, StatusFail, "cgroups"},
		{"no image", runner.Result{}, errdefs.ErrNotFound.WithMessage("image missing"), StatusFail, "make setup"},
		{"engine failed", runner.Result{}, errors.New("boom"), StatusFail, "--debug run --engine oci --isolation gvisor"},
	} {
		c := limitsCheck(o, tc.res, tc.err)
		if c.Name != "probe: limits enforced" || c.Status != tc.status || !strings.Contains(c.Fix, tc.fix) {
			t.Errorf("%s: %+v, want status %s and a fix mentioning %q", tc.name, c, tc.status, tc.fix)
		}
	}
}

func TestProbeSkippedAfterFailures(t *testing.T) {
	called := false
	o := Options{Run: func(_ context.Context, _ runner.Spec) (runner.Result, error) {
		called = true
		return runner.Result{}, nil
	}}
	got := probe(context.Background(), o, 2)
	if called || len(got) != 1 || got[0].Status != StatusFail || !strings.Contains(got[0].Detail, "2 check(s) above failed") {
		t.Errorf("probe after failures: called %v, rows %+v", called, got)
	}
	if got := probe(context.Background(), Options{}, 0); got != nil {
		t.Errorf("probe with no Run: %+v", got)
	}
}

func TestProbeSpecs(t *testing.T) {
	var specs []runner.Spec
	o := Options{Engine: "oci", Isolation: "seccomp", Run: func(_ context.Context, s runner.Spec) (runner.Result, error) {
		specs = append(specs, s)
		if len(specs) == 1 {
			return runner.Result{Reason: runner.ReasonExited, Stdout: runner.Stream{Head: []byte(goodProbe)}}, nil
		}
		return runner.Result{Reason: runner.ReasonOOM, ExitCode: 137}, nil
	}}
	got := probe(context.Background(), o, 0)
	var names []string
	for _, c := range got {
		names = append(names, c.Name+" "+c.Status)
	}
	want := []string{"probe: no network ok", "probe: read-only root ok", "probe: no capabilities ok", "probe: limits enforced ok"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("rows %v, want %v", names, want)
	}
	if len(specs) != 2 {
		t.Fatalf("%d runs, want 2", len(specs))
	}
	for i, s := range specs {
		if s.Image != "" || s.Policy.Isolation != "seccomp" || s.Policy.Limits.Timeout != probeTimeout {
			t.Errorf("run %d: image %q isolation %q timeout %v", i, s.Image, s.Policy.Isolation, s.Policy.Limits.Timeout)
		}
	}
	if specs[0].Policy.Limits.Memory != 0 || specs[1].Policy.Limits.Memory != probeMemory {
		t.Errorf("memory limits %v and %v, want default and %d", specs[0].Policy.Limits.Memory, specs[1].Policy.Limits.Memory, probeMemory)
	}
}

func TestProbeRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  runner.Result
		err  error
		want string // in Detail
	}{
		{"engine error", runner.Result{}, errors.New("runsc exploded"), "runsc exploded"},
		{"crashed", runner.Result{Reason: runner.ReasonExited, ExitCode: 1, Stderr: runner.Stream{Head: []byte("Traceback\x1b[31m")}}, nil, `exit 1; stderr "Traceback\x1b[31m"`},
		{"timed out", runner.Result{Reason: runner.ReasonTimeout, ExitCode: 137}, nil, "reason timeout"},
	} {
		o := Options{Run: func(context.Context, runner.Spec) (runner.Result, error) { return tc.res, tc.err }}
		got := probe(context.Background(), o, 0)
		if len(got) != 1 || got[0].Status != StatusFail || got[0].Fix == "" || !strings.Contains(got[0].Detail, tc.want) {
			t.Errorf("%s: %+v, want one FAIL mentioning %q", tc.name, got, tc.want)
		}
	}
}

var sample = []Check{
	{Name: "root", Status: StatusOK, Detail: "euid 0"},
	{Name: "runsc", Status: StatusFail, Detail: "not installed at /r/tools/runsc", Fix: "run `make setup`"},
	{Name: "dockerd", Status: StatusWarn, Detail: "cannot reach dockerd (needed only for --engine docker)", Fix: "start dockerd"},
	{Name: "probe: no network", Status: StatusOK, Detail: "connecting to 192.0.2.1:80 failed: ENETUNREACH"},
}

func TestWriteText(t *testing.T) {
	for _, tc := range []struct {
		name   string
		checks []Check
	}{
		{"failures", sample},
		{"warnings", []Check{sample[0], sample[2], sample[3]}},
		{"passed", []Check{sample[0], sample[3]}},
	} {
		var b bytes.Buffer
		if err := WriteText(&b, tc.checks); err != nil {
			t.Fatal(err)
		}
		golden(t, "text-"+tc.name+".golden", b.String())
	}
}

func TestWriteJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		checks []Check
		ok     bool
	}{
		{"failures", sample, false},
		{"warnings", sample[2:], true},
		{"empty", nil, true},
	} {
		var b bytes.Buffer
		if err := WriteJSON(&b, tc.checks); err != nil {
			t.Fatal(err)
		}
		var r struct {
			Checks []map[string]any `json:"checks"`
			OK     *bool            `json:"ok"`
		}
		dec := json.NewDecoder(&b)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.OK == nil || *r.OK != tc.ok || r.Checks == nil || len(r.Checks) != len(tc.checks) {
			t.Errorf("%s: %+v", tc.name, r)
		}
		for _, c := range r.Checks {
			for _, k := range []string{"name", "status", "detail", "fix"} {
				if _, found := c[k]; !found {
					t.Errorf("%s: check %v has no %q", tc.name, c, k)
				}
			}
		}
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestCheckAgent(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "airlock-agent")
	if err := os.WriteFile(exe, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, engine, mode, path, status string
	}{
		{"installed", "oci", "gvisor", exe, StatusOK},
		{"missing", "oci", "gvisor", filepath.Join(dir, "none"), StatusWarn},
		{"a directory", "oci", "gvisor", dir, StatusWarn},
		{"not used under runc", "oci", "seccomp", filepath.Join(dir, "none"), StatusOK},
		{"not used by docker", "docker", "gvisor", filepath.Join(dir, "none"), StatusOK},
	} {
		c := checkAgent(context.Background(), Options{Engine: tc.engine, Isolation: tc.mode, Agent: tc.path})
		if c.Status != tc.status || (c.Status == StatusWarn && c.Fix == "") {
			t.Errorf("%s: %+v; want status %s", tc.name, c, tc.status)
		}
	}
}

// fixedErr is an error that says its own fix, as the docker engine's
// refusal of a dockerd that would drop airlock's limits does.
type fixedErr struct{ msg, fix string }

func (e fixedErr) Error() string { return e.msg }
func (e fixedErr) Fix() string   { return e.fix }

// The dockerd row FAILs with the docker engine's refusal, and gives the
// refusal's own fix rather than the generic one.
func TestCheckDockerdFix(t *testing.T) {
	limits := fixedErr{"unavailable: dockerd says false for SwapLimit", "boot with `swapaccount=1`"}
	for _, tc := range []struct {
		name, engine string
		err          error
		status, fix  string
	}{
		{"limits", "docker", fmt.Errorf("checking: %w", limits), StatusFail, limits.fix},
		{"limits, not needed", "oci", limits, StatusWarn, limits.fix},
		{"unreachable", "docker", errdefs.ErrUnavailable, StatusFail, "`make setup`"},
		{"permission", "docker", fs.ErrPermission, StatusFail, "as root"},
	} {
		o := Options{Engine: tc.engine, Isolation: "gvisor", DockerRuntime: func(context.Context, isolation.Mode) (string, error) { return "", tc.err }}
		c := checkDockerd(context.Background(), o)
		if c.Status != tc.status || !strings.Contains(c.Detail, tc.err.Error()) || !strings.Contains(c.Fix, tc.fix) {
			t.Errorf("%s: %+v; want status %s, the error, and a fix naming %q", tc.name, c, tc.status, tc.fix)
		}
	}
}
