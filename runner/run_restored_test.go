package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// What keeps a run off a held or restored sandbox: each difference is
// named, and a run that differs only in what an exec narrows fits.
func TestFitsShape(t *testing.T) {
	pol := isolation.Default()
	pol.Seccomp = &isolation.SeccompProfile{SHA256: strings.Repeat("c", 64)}
	base := &engine.SandboxSpec{Image: digest.Digest("sha256:" + strings.Repeat("a", 64)), Policy: pol}
	out := Output{}.WithDefaults()
	for _, c := range []struct {
		name string
		edit func(*engine.SandboxSpec, *Output)
		want string
	}{
		{"fits", func(j *engine.SandboxSpec, _ *Output) {
			j.Policy.Limits.Timeout, j.Policy.Limits.Output = time.Second, 1
		}, ""},
		{"image", func(j *engine.SandboxSpec, _ *Output) { j.Image = digest.Digest("sha256:" + strings.Repeat("b", 64)) }, "another image"},
		{"timeout", func(j *engine.SandboxSpec, _ *Output) { j.Policy.Limits.Timeout = 2 * pol.Limits.Timeout }, "is over the sandbox's"},
		{"output", func(_ *engine.SandboxSpec, o *Output) { o.Dir = "/results" }, "another output directory"},
		{"policy", func(j *engine.SandboxSpec, _ *Output) { j.Policy.Limits.Memory /= 2 }, "another policy"},
	} {
		job, o := *base, out
		c.edit(&job, &o)
		got := fitsShape(o, &job, out, base)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
}

// A one-shot run on a snapshot template asks for no TTL: its sandbox
// lives the run's timeout and restoredGrace, held to --max-timeout (with
// the run) and not to --max-ttl, nor is the template's own TTL.
func TestRunRestoredNotHeldToMaxTTL(t *testing.T) {
	rn, err := New(WithRoot(t.TempDir()), WithEngine(&snapshotting{}), WithCeilings(Ceilings{Timeout: time.Hour, TTL: 30 * time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tmplTTL := range []time.Duration{30 * time.Minute, 0 /* the default, 1h */} {
		s := fakeSpec()
		s.Policy.Limits.Timeout = 30 * time.Minute
		base := SandboxSpec{Image: s.Image, Snapshot: "snap", TTL: tmplTTL, Output: Output{Disabled: true}}
		base.Policy.Limits.Timeout = time.Hour
		// The refusing engine makes nothing: any refusal but a ceiling's.
		_, why, err := rn.RunRestored(t.Context(), s, base, nil, nil)
		if why != "" || errdefs.IsInvalidArgument(err) {
			t.Errorf("template TTL %v, run timeout 30m: why %q, err %v; want no ceiling's refusal", tmplTTL, why, err)
		}
	}
	// A run's timeout is still held to --max-timeout.
	s := fakeSpec()
	s.Policy.Limits.Timeout = 2 * time.Hour
	base := SandboxSpec{Image: s.Image, Snapshot: "snap", Output: Output{Disabled: true}}
	base.Policy.Limits.Timeout = 2 * time.Hour
	if _, _, err := rn.RunRestored(t.Context(), s, base, nil, nil); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a run of timeout 2h over a --max-timeout of 1h: %v", err)
	}
}

// A one-shot sandbox (a /run_code answer's) whose TTL is its job's
// timeout and a grace is held to --max-timeout with the job, not to
// --max-ttl; a long-lived sandbox's TTL is.
func TestOneShotSandboxNotHeldToMaxTTL(t *testing.T) {
	rn, err := New(WithRoot(t.TempDir()), WithEngine(&snapshotting{}), WithCeilings(Ceilings{Timeout: 10 * time.Minute, TTL: 10 * time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	s := SandboxSpec{Image: fakeSpec().Image, TTL: 15 * time.Minute, OneShot: true, Output: Output{Disabled: true}}
	s.Policy.Limits.Timeout = 10 * time.Minute
	if _, err := rn.planSandbox(s); err != nil {
		t.Errorf("a one-shot sandbox of TTL 15m under --max-ttl 10m: %v", err)
	}
	s.OneShot = false
	if _, err := rn.planSandbox(s); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a long-lived sandbox of TTL 15m under --max-ttl 10m: %v; want refused", err)
	}
}
