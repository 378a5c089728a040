package runner

import (
	"strings"
	"testing"
	"time"

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
