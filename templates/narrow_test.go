package templates

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
)

// narrowBase is the template every narrowing case starts from.
func narrowBase(t *testing.T) *Template {
	return mustNew(t, "py", runner.Spec{
		Env: []string{"A=1", "B=2"}, Workdir: "/work",
		Policy: isolation.Policy{Limits: isolation.Limits{
			Timeout: 10 * time.Second, Memory: 512 << 20, CPUs: 1000, Pids: 128,
			Output: 1 << 20, Tmp: 64 << 20, FileSize: 32 << 20, OpenFiles: 512,
		}},
		Output: runner.Output{Size: 16 << 20, Files: 100, MaxFileSize: 8 << 20, Types: []string{"text/plain", "application/json", "image/png"}},
	})
}

func TestNarrow(t *testing.T) {
	lim := func(f func(*isolation.Limits)) runner.Spec {
		var s runner.Spec
		f(&s.Policy.Limits)
		return s
	}
	out := func(f func(*runner.Output)) runner.Spec {
		var s runner.Spec
		f(&s.Output)
		return s
	}
	for _, tc := range []struct {
		name     string
		explicit runner.Spec
		// check inspects the narrowed spec of an accepted case.
		check func(runner.Spec) bool
		// refused names the field of a refused case, and what its message says.
		refused []string
	}{
		{"nothing", runner.Spec{}, func(s runner.Spec) bool {
			return s.Policy.Limits.Memory == 512<<20 && s.Policy.Limits.Timeout == 10*time.Second
		}, nil},
		{"timeout lower", lim(func(l *isolation.Limits) { l.Timeout = 2 * time.Second }), func(s runner.Spec) bool { return s.Policy.Limits.Timeout == 2*time.Second }, nil},
		{"timeout equal", lim(func(l *isolation.Limits) { l.Timeout = 10 * time.Second }), func(s runner.Spec) bool { return s.Policy.Limits.Timeout == 10*time.Second }, nil},
		{"timeout higher", lim(func(l *isolation.Limits) { l.Timeout = time.Minute }), nil, []string{"timeout 1m0s is above template \"py\"'s 10s"}},
		{"memory lower", lim(func(l *isolation.Limits) { l.Memory = 256 << 20 }), func(s runner.Spec) bool { return s.Policy.Limits.Memory == 256<<20 }, nil},
		{"memory higher", lim(func(l *isolation.Limits) { l.Memory = 2 << 30 }), nil, []string{"memory 2GiB is above template \"py\"'s 512MiB", "leave memory out", "airlock template create"}},
		{"cpus lower", lim(func(l *isolation.Limits) { l.CPUs = 500 }), func(s runner.Spec) bool { return s.Policy.Limits.CPUs == 500 }, nil},
		{"cpus higher", lim(func(l *isolation.Limits) { l.CPUs = 1500 }), nil, []string{"cpus 1.5 is above template \"py\"'s 1"}},
		{"pids lower", lim(func(l *isolation.Limits) { l.Pids = 64 }), func(s runner.Spec) bool { return s.Policy.Limits.Pids == 64 }, nil},
		{"pids higher", lim(func(l *isolation.Limits) { l.Pids = 129 }), nil, []string{"pids 129 is above template \"py\"'s 128"}},
		{"output lower", lim(func(l *isolation.Limits) { l.Output = 4096 }), func(s runner.Spec) bool { return s.Policy.Limits.Output == 4096 }, nil},
		{"output higher", lim(func(l *isolation.Limits) { l.Output = 2 << 20 }), nil, []string{"output_limit 2MiB is above template \"py\"'s 1MiB"}},
		{"tmp lower", lim(func(l *isolation.Limits) { l.Tmp = 8 << 20 }), func(s runner.Spec) bool { return s.Policy.Limits.Tmp == 8<<20 }, nil},
		{"tmp higher", lim(func(l *isolation.Limits) { l.Tmp = 128 << 20 }), nil, []string{"tmp_size 128MiB is above template \"py\"'s 64MiB"}},
		{"file size lower", lim(func(l *isolation.Limits) { l.FileSize = 1 << 20 }), func(s runner.Spec) bool { return s.Policy.Limits.FileSize == 1<<20 }, nil},
		{"file size higher", lim(func(l *isolation.Limits) { l.FileSize = 64 << 20 }), nil, []string{"file_size 64MiB is above template \"py\"'s 32MiB"}},
		{"open files lower", lim(func(l *isolation.Limits) { l.OpenFiles = 64 }), func(s runner.Spec) bool { return s.Policy.Limits.OpenFiles == 64 }, nil},
		{"open files higher", lim(func(l *isolation.Limits) { l.OpenFiles = 1024 }), nil, []string{"open_files 1024 is above template \"py\"'s 512"}},
		{"two widenings", lim(func(l *isolation.Limits) { l.Memory, l.Pids = 1<<30, 1000 }), nil, []string{"memory 1GiB", "pids 1000"}},

		{"image same digest", runner.Spec{Image: defID}, func(s runner.Spec) bool { return s.Image == "airlock/default@"+defID }, nil},
		{"image other", runner.Spec{Image: "x@" + otherID}, nil, []string{"image x@" + otherID + " is not template \"py\"'s image"}},
		{"image tag", runner.Spec{Image: "python:3"}, nil, []string{"names a tag"}},
		{"isolation same", runner.Spec{Policy: isolation.Policy{Isolation: isolation.GVisor}}, func(s runner.Spec) bool { return s.Policy.Isolation == isolation.GVisor }, nil},
		{"isolation other", runner.Spec{Policy: isolation.Policy{Isolation: isolation.Seccomp}}, nil, []string{"isolation seccomp is not template \"py\"'s gvisor"}},
		{"compiled seccomp", runner.Spec{Policy: isolation.Policy{Seccomp: &isolation.SeccompProfile{}}}, nil, []string{"compiled seccomp profile"}},

		{"out none", out(func(o *runner.Output) { o.Disabled = true }), func(s runner.Spec) bool { return s.Output.Disabled }, nil},
		{"out dir same", out(func(o *runner.Output) { o.Dir = "/out" }), func(s runner.Spec) bool { return s.Output.Dir == "/out" }, nil},
		{"out dir other", out(func(o *runner.Output) { o.Dir = "/results" }), nil, []string{"out_dir /results is not template \"py\"'s /out"}},
		{"out limit lower", out(func(o *runner.Output) { o.Size = 4 << 20 }), func(s runner.Spec) bool { return s.Output.Size == 4<<20 && s.Output.MaxFileSize == 4<<20 }, nil},
		{"out limit higher", out(func(o *runner.Output) { o.Size = 64 << 20 }), nil, []string{"out_limit 64MiB is above template \"py\"'s 16MiB"}},
		{"out files lower", out(func(o *runner.Output) { o.Files = 10 }), func(s runner.Spec) bool { return s.Output.Files == 10 }, nil},
		{"out files higher", out(func(o *runner.Output) { o.Files = 1000 }), nil, []string{"out_files 1000 is above template \"py\"'s 100"}},
		{"artifact size lower", out(func(o *runner.Output) { o.MaxFileSize = 1 << 20 }), func(s runner.Spec) bool { return s.Output.MaxFileSize == 1<<20 }, nil},
		{"artifact size higher", out(func(o *runner.Output) { o.MaxFileSize = 16 << 20 }), nil, []string{"artifact_max_size 16MiB is above template \"py\"'s 8MiB"}},
		{"types subset", out(func(o *runner.Output) { o.Types = []string{"image/png"} }), func(s runner.Spec) bool { return slices.Equal(s.Output.Types, []string{"image/png"}) }, nil},
		{"types wider", out(func(o *runner.Output) { o.Types = []string{"text/plain", "application/zip"} }), nil, []string{"artifact_types application/zip are not among template \"py\"'s"}},
		{"delivery is the job's", out(func(o *runner.Output) { o.Artifacts, o.AllowDotfiles = "/tmp/a", true }),
			func(s runner.Spec) bool {
				return s.Output.Artifacts == "/tmp/a" && s.Output.AllowDotfiles && s.Output.Size == 16<<20
			}, nil},

		{"env added", runner.Spec{Env: []string{"C=3", "A=9"}}, func(s runner.Spec) bool { return slices.Equal(s.Env, []string{"B=2", "C=3", "A=9"}) }, nil},
		{"workdir", runner.Spec{Workdir: "/w2"}, func(s runner.Spec) bool { return s.Workdir == "/w2" }, nil},
		{"job fields", runner.Spec{Argv: []string{"true"}, JobID: "j", InputLimit: 1 << 20, Inputs: []runner.Input{{Host: "x"}}},
			func(s runner.Spec) bool {
				return slices.Equal(s.Argv, []string{"true"}) && s.JobID == "j" && s.InputLimit == 1<<20 && len(s.Inputs) == 1 && s.Workdir == "/work"
			}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := narrowBase(t)
			before := tp.Version()
			s, err := tp.Narrow(tc.explicit)
			if tp.Version() != before {
				t.Fatal("Narrow changed the template")
			}
			if tc.refused != nil {
				if err == nil || !errdefs.IsInvalidArgument(err) {
					t.Fatalf("got %v, want an invalid-argument refusal", err)
				}
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("narrowed spec %+v", s)
			}
		})
	}
}

func TestNarrowOutputDisabledTemplate(t *testing.T) {
	tp := mustNew(t, "noout", runner.Spec{Output: runner.Output{Disabled: true}})
	for _, o := range []runner.Output{{Dir: "/out"}, {Size: 1 << 20}, {Files: 1}, {MaxFileSize: 1}, {Types: []string{"text/plain"}}} {
		if _, err := tp.Narrow(runner.Spec{Output: o}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "has no output directory") {
			t.Errorf("output %+v on a template without one: got %v", o, err)
		}
	}
	s, err := tp.Narrow(runner.Spec{Output: runner.Output{Disabled: true}})
	if err != nil || !s.Output.Disabled {
		t.Errorf("out_dir none on a template without one: %+v, %v", s.Output, err)
	}
	// Delivery with nothing to deliver is refused, not dropped.
	for _, o := range []runner.Output{{Artifacts: "/tmp/a"}, {Quarantine: "/tmp/q"}} {
		if _, err := tp.Narrow(runner.Spec{Output: o}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "need an output directory") {
			t.Errorf("output %+v on a template without one: got %v", o, err)
		}
	}
	if _, err := narrowBase(t).Narrow(runner.Spec{Output: runner.Output{Disabled: true, Artifacts: "/tmp/a"}}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("artifacts with out_dir none: got %v", err)
	}
}

func TestNarrowSeccompProfile(t *testing.T) {
	prof := profileFile(t)
	custom := mustNew(t, "custom", runner.Spec{SeccompProfile: prof})
	plain := mustNew(t, "plain", runner.Spec{})
	// The same profile again is no change.
	if _, err := custom.Narrow(runner.Spec{SeccompProfile: prof}); err != nil {
		t.Errorf("the template's own profile: %v", err)
	}
	// Any profile on a template with the default, even one that narrows it.
	if _, err := plain.Narrow(runner.Spec{SeccompProfile: prof}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "airlock's default") {
		t.Errorf("a profile on a default-profile template: %v", err)
	}
	if _, err := plain.Narrow(runner.Spec{SeccompProfile: "/no/such.json"}); !errdefs.IsNotFound(err) {
		t.Errorf("a missing profile: %v", err)
	}
}

func TestNarrowSandbox(t *testing.T) {
	tp := narrowBase(t)
	in := runner.SandboxSpec{Env: []string{"C=3"}, TTL: time.Hour, IdleTimeout: time.Minute, WorkspaceSize: units.Bytes(1 << 30), Labels: map[string]string{"k": "v"}}
	in.Policy.Limits.Memory = 128 << 20
	s, err := tp.NarrowSandbox(in)
	if err != nil {
		t.Fatal(err)
	}
	if s.Policy.Limits.Memory != 128<<20 || s.Policy.Limits.Pids != 128 || s.TTL != time.Hour || s.IdleTimeout != time.Minute ||
		s.WorkspaceSize != 1<<30 || s.Labels["k"] != "v" || !slices.Equal(s.Env, []string{"A=1", "B=2", "C=3"}) || s.Image != tp.Image {
		t.Errorf("NarrowSandbox = %+v", s)
	}
	in.Policy.Limits.Memory = 1 << 30
	if _, err := tp.NarrowSandbox(in); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a widening sandbox: %v", err)
	}
}

func TestEngineFor(t *testing.T) {
	for _, tc := range []struct {
		template, explicit, want string
		refused                  bool
	}{
		{"auto", "", "auto", false}, {"auto", "auto", "auto", false}, {"auto", "oci", "oci", false}, {"auto", "docker", "docker", false},
		{"oci", "", "oci", false}, {"oci", "auto", "oci", false}, {"oci", "oci", "oci", false}, {"oci", "docker", "", true},
		{"docker", "oci", "", true}, {"docker", "docker", "docker", false}, {"auto", "podman", "", true},
	} {
		tp := &Template{Name: "py", Engine: tc.template}
		got, err := tp.EngineFor(tc.explicit)
		if tc.refused != (err != nil) || got != tc.want || err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("template %s, explicit %q: got %q, %v", tc.template, tc.explicit, got, err)
		}
	}
}
