package runner

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/units"
)

// FuzzParseJobs reads a batch file, then plans its first jobs as a batch
// does (jobSpec, normalize, plan) on a runner whose engine is never
// reached. Every non-blank, non-comment line is a job or an invalid_input
// result; a job reads back from its own JSON; and a job that plans has
// the limits it gave, inputs beneath the input root through no symlink,
// and a policy that validates.
func FuzzParseJobs(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","argv":["true"]}`,
		`{"id":"b","argv":["echo","x"],"expected_stdout":"x\n","limits":{"timeout":"2s","memory":"64MiB","cpus":"0.5","pids":32,"output":"4KiB"}}`,
		`{"id":"c","argv":["cat","/work/a.txt"],"inputs":[{"host":"data/a.txt"},{"host":"data","sandbox":"/data"}],"stdin":"hi","env":["A=1"]}`,
		`{"id":"d","argv":["x"],"inputs":[{"host":"../etc/passwd"}]}`,
		`{"id":"e","argv":["x"],"inputs":[{"host":"/etc/passwd"}]}`,
		`{"id":"f","argv":["x"],"inputs":[{"host":"link/passwd"}]}`,
		`{"id":"g","argv":["x"],"inputs":[{"host":"data/a.txt","sandbox":"/proc/x"}]}`,
		`{"id":"h","argv":["x"],"limits":{"pids":0,"memory":"0","timeout":"0s"}}`,
		`{"id":"i","argv":["x"],"limits":{"cpus":"0.0001"}}`,
		`{"id":"j","argv":["x"],"template":"py"}`,
		`{"id":"k","argv":["x"],"image":"sha256:` + strings.Repeat("2", 64) + `"}`,
		`{"id":"l","argv":["x"],"image":"ubuntu"}`,
		"{\"id\":\"a\",\"argv\":[\"true\"]}\n{\"id\":\"a\",\"argv\":[\"true\"]}\n# comment\n\n  \nnot json\n{\"argv\":[\"x\"]}\n{\"id\":\"m\"}",
		`{"id":"n","argv":["x"],"unknown":1}`,
		`{"id":"o","argv":["a\u0000b"],"env":["=x","A"]}`,
		"\r\n\r\n{\"id\":\"p\",\"argv\":[\"x\"]}\r",
		``,
	} {
		f.Add([]byte(s))
	}
	root := f.TempDir()
	idx := images.OpenIndex(filepath.Join(root, "images"))
	if err := idx.SetDefault(images.Lock{Ref: "airlock/default@sha256:" + strings.Repeat("1", 64), BuiltAt: time.Now()}); err != nil {
		f.Fatal(err)
	}
	r, err := New(WithRoot(root), WithEngine(&fakeEngine{}))
	if err != nil {
		f.Fatal(err)
	}
	inputs := f.TempDir()
	if err := os.MkdirAll(filepath.Join(inputs, "data"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inputs, "data", "a.txt"), []byte("a"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(inputs, "link")); err != nil {
		f.Fatal(err)
	}
	base := Spec{Env: []string{"BASE=1"}}

	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, bad, err := ParseJobs(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("reading from memory: %v", err)
		}
		lines := 0
		for _, l := range bytes.Split(b, []byte("\n")) {
			if l = bytes.TrimSpace(l); len(l) > 0 && l[0] != '#' {
				lines++
			}
		}
		if len(jobs)+len(bad) != lines {
			t.Fatalf("%d lines, %d jobs and %d refused", lines, len(jobs), len(bad))
		}
		for _, br := range bad {
			if br.JobID == "" || br.Reason != ReasonError || br.ErrorKind != "invalid_input" || br.ExitCode != -1 || br.Error == "" {
				t.Fatalf("a refused line's result: %+v", br)
			}
		}
		ids := map[string]bool{}
		for _, j := range jobs {
			if j.ID == "" || ids[j.ID] || len(j.Argv) == 0 {
				t.Fatalf("job %+v (ids so far %v)", j, ids)
			}
			ids[j.ID] = true
			line, err := json.Marshal(j)
			if err != nil {
				t.Fatalf("encoding job %q: %v", j.ID, err)
			}
			back, bbad, err := ParseJobs(bytes.NewReader(line))
			if err != nil || len(bbad) > 0 || len(back) != 1 || !reflect.DeepEqual(back[0], j) {
				t.Fatalf("job %+v does not read back from %s: %+v, %+v, %v", j, line, back, bbad, err)
			}
		}
		for _, j := range jobs[:min(len(jobs), 4)] {
			j.inputRoot = inputs
			s, err := BatchOptions{Base: base, InputRoot: inputs}.jobSpec(j)
			if err != nil {
				continue
			}
			s.normalize()
			job, err := r.plan(s)
			if err != nil {
				continue
			}
			if err := job.Policy.Validate(); err != nil {
				t.Fatalf("job %q planned a policy that does not validate: %v", j.ID, err)
			}
			checkJobLimits(t, j, job.Policy.Limits)
			if !slices.Equal(job.Init.Argv, j.Argv) || !slices.Equal(job.Env, append(slices.Clone(base.Env), j.Env...)) {
				t.Fatalf("job %q planned argv %q env %q", j.ID, job.Init.Argv, job.Env)
			}
			if j.Stdin != "" {
				got, _ := io.ReadAll(job.Init.Stdin)
				if string(got) != j.Stdin {
					t.Fatalf("stdin %q, want %q", got, j.Stdin)
				}
			} else if job.Init.Stdin != nil {
				t.Fatal("stdin open without stdin given")
			}
			if len(s.Inputs) != len(j.Inputs) {
				t.Fatalf("%d inputs planned of %d", len(s.Inputs), len(j.Inputs))
			}
			for _, in := range s.Inputs {
				checkConfined(t, inputs, in)
			}
		}
	})
}

// checkJobLimits checks that each limit a job gave was planned as given,
// and the others are airlock's defaults.
func checkJobLimits(t *testing.T, j Job, got isolation.Limits) {
	t.Helper()
	want := isolation.Default().Limits
	jl := j.Limits
	if jl.Timeout != "" {
		want.Timeout, _ = units.ParseDuration(jl.Timeout)
	}
	if jl.Memory != "" {
		want.Memory, _ = units.ParseBytes(jl.Memory)
	}
	if jl.CPUs != "" {
		want.CPUs, _ = units.ParseCPUs(string(jl.CPUs))
	}
	if jl.Output != "" {
		want.Output, _ = units.ParseBytes(jl.Output)
	}
	if jl.Pids != nil {
		want.Pids = *jl.Pids
	}
	if got != want {
		t.Fatalf("job %q planned limits %+v; it asked for %+v", j.ID, got, want)
	}
}

// checkConfined checks that a planned input lies beneath root, through no
// symlink, and appears at an absolute, clean path.
func checkConfined(t *testing.T, root string, in Input) {
	t.Helper()
	if in.Beneath != root || !filepath.IsLocal(in.Host) || slices.Contains(strings.Split(in.Host, "/"), "..") {
		t.Fatalf("input %+v is not a local path beneath %q", in, root)
	}
	p := root
	for _, c := range strings.Split(filepath.Clean(in.Host), "/") {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			t.Fatalf("input %q: %s is a symlink or missing (%v)", in.Host, p, err)
		}
	}
	if !path.IsAbs(in.Sandbox) || path.Clean(in.Sandbox) != in.Sandbox {
		t.Fatalf("input %q appears at %q", in.Host, in.Sandbox)
	}
}
