package runner

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/wire"
)

// A command the kernel could never start is refused up front, as invalid
// input naming the bound; one at the bounds passes.
func TestCheckCommandBounds(t *testing.T) {
	many := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	for _, c := range []struct {
		name      string
		argv, env []string
		want      string // "" when accepted
	}{
		{"plain", []string{"true"}, []string{"A=1"}, ""},
		{"no command", nil, nil, "no command"},
		{"NUL", []string{"a\x00b"}, nil, "NUL"},
		{"bad env", []string{"true"}, []string{"1A=x"}, "NAME=VALUE"},
		{"env at its cap", []string{"true"}, many(wire.MaxEnv, "A=1"), ""},
		{"env past its cap", []string{"true"}, many(wire.MaxEnv+1, "A=1"), "at most 1024"},
		{"one string at the kernel's bound", []string{"echo", strings.Repeat("x", maxArgString)}, nil, ""},
		{"one string past it", []string{"echo", strings.Repeat("x", maxArgString+1)}, nil, "MAX_ARG_STRLEN"},
		{"an env value past it", []string{"true"}, []string{"A=" + strings.Repeat("x", maxArgString)}, "MAX_ARG_STRLEN"},
		{"too much in all", append([]string{"echo"}, many(20, strings.Repeat("x", 120<<10))...), nil, "ARG_MAX"},
		{"many small arguments", append([]string{"echo"}, many(300000, "x")...), nil, "ARG_MAX"},
	} {
		err := checkCommand(c.argv, c.env)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", c.name, err)
		case c.want != "" && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want invalid input naming %q", c.name, err, c.want)
		}
	}
}

// An output directory's file cap past wire.MaxOutFiles is refused as
// invalid input naming the field and the bound, whichever face set it: the
// tmpfs's inode count would overflow, or stop bounding anything.
func TestCheckFilesOutFilesBound(t *testing.T) {
	for _, c := range []struct {
		files int
		want  string // "" when accepted
	}{
		{1, ""},
		{wire.MaxOutFiles, ""},
		{wire.MaxOutFiles + 1, "out_files, --out-files) 1000001: give at most 1000000"},
		{1_000_000_000_000_000, "give at most 1000000"},
		{math.MaxInt, "give at most 1000000"},
	} {
		s := Spec{Output: Output{Files: c.files}.WithDefaults()}
		err := checkFiles(s)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d files: %v; want it accepted", c.files, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d files: %v; want a refusal saying %q", c.files, err, c.want)
		}
	}
	r, err := New(WithRoot(t.TempDir()), WithEngine(&fakeEngine{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.plan(Spec{Argv: []string{"true"}, Output: Output{Files: math.MaxInt}.WithDefaults()}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "out_files") {
		t.Errorf("plan of MaxInt files: %v; want invalid input naming out_files", err)
	}
}

// A timeout past the policy's maximum is refused as invalid input naming
// the field and the maximum: `airlock run --timeout 2562047h47m16s`
// parses, and its deadline, now + timeout + 1m, would overflow into the
// past, where any reaper takes the live run for overdue.
func TestPlanRefusesHugeTimeout(t *testing.T) {
	d, err := wire.Duration("timeout", "2562047h47m16s")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(WithRoot(t.TempDir()), WithEngine(&fakeEngine{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, timeout := range []time.Duration{d, isolation.MaxTimeout + time.Millisecond} {
		pol := isolation.Policy{Limits: isolation.Limits{Timeout: timeout}}
		_, err = r.plan(Spec{Argv: []string{"true"}, Image: "sha256:" + strings.Repeat("1", 64), Policy: pol, Output: Output{}.WithDefaults()})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "timeout") || !strings.Contains(err.Error(), "maximum") {
			t.Errorf("timeout %v: %v; want invalid input naming the timeout and its maximum", timeout, err)
		}
	}
	now := time.Now()
	for _, timeout := range []time.Duration{isolation.MaxTimeout, d, math.MaxInt64} {
		if got := deadline(now, timeout); !got.After(now) {
			t.Errorf("timeout %v: deadline %v, not after %v", timeout, got, now)
		}
	}
}

// A working directory in /proc, /sys or /dev is refused before anything
// is made, naming workdir: /proc/self/fd/N as cwd is runc's
// CVE-2024-21626.
func TestCheckFilesRefusesWorkdirInKernelDirs(t *testing.T) {
	for _, wd := range []string{"/proc/self/fd/7", "/proc/1/cwd", "/sys/fs/cgroup", "/dev", "work"} {
		s := Spec{Workdir: wd, Output: Output{Disabled: true}}
		if err := checkFiles(s); err == nil || !strings.Contains(err.Error(), "workdir") {
			t.Errorf("workdir %q: %v; want a refusal naming workdir", wd, err)
		}
	}
	if err := checkFiles(Spec{Workdir: "/work", Output: Output{Disabled: true}}); err != nil {
		t.Errorf("workdir /work: %v", err)
	}
}
