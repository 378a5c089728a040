package runner

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseJobs(t *testing.T) {
	in := `{"id": "a", "argv": ["true"]}

# a comment
{"id": "b", "argv": ["echo", "x"], "expected_stdout": "x\n", "limits": {"timeout": "2s"}}
not json
{"argv": ["true"]}
{"id": "a", "argv": ["true"]}
{"id": "c"}
{"id": "d", "argv": ["true"], "unknown_field": 1}
`
	jobs, bad, err := ParseJobs(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].ID != "b" || *jobs[1].ExpectedStdout != "x\n" {
		t.Errorf("jobs %+v", jobs)
	}
	wantBad := []string{"line-5", "line-6", "line-7", "c", "d"}
	if len(bad) != len(wantBad) {
		t.Fatalf("bad %+v", bad)
	}
	for i, b := range bad {
		if b.JobID != wantBad[i] || b.Reason != ReasonError || b.ErrorKind != "invalid_input" || b.Error == "" {
			t.Errorf("bad[%d] = %+v, want id %s", i, b, wantBad[i])
		}
	}
}

func TestJobSpecLimits(t *testing.T) {
	s, err := Job{ID: "x", Argv: []string{"true"}, Limits: JobLimits{Timeout: "2s", Memory: "64MiB", CPUs: "0.5", Pids: ptr(int64(32)), Output: "4KiB"}}.spec(Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	l := s.Policy.Limits
	if l.Timeout.Seconds() != 2 || l.Memory != 64<<20 || l.CPUs != 500 || l.Pids != 32 || l.Output != 4096 {
		t.Errorf("limits %+v", l)
	}
	if _, err := (Job{ID: "x", Argv: []string{"true"}, Limits: JobLimits{Memory: "lots"}}).spec(Spec{}, ""); err == nil {
		t.Error("a malformed limit was accepted")
	}
}

func TestSummarize(t *testing.T) {
	yes, no := true, false
	var rs []BatchResult
	for i := 1; i <= 100; i++ {
		rs = append(rs, BatchResult{JobID: "j", Pass: &yes, Result: Result{ID: "r", Reason: ReasonExited, DurationMS: int64(i)}})
	}
	rs = append(rs, BatchResult{Pass: &no, Result: Result{ID: "r", Reason: ReasonTimeout, DurationMS: 1000}})
	rs = append(rs, BatchResult{Result: Result{Reason: ReasonError}})
	s := Summarize(rs)
	if s.Jobs != 102 || s.Passed != 100 || s.Failed != 1 || s.ByReason[ReasonExited] != 100 || s.ByReason[ReasonError] != 1 {
		t.Errorf("summary %+v", s)
	}
	if s.P50MS != 51 || s.P99MS != 100 {
		t.Errorf("p50 %d p99 %d", s.P50MS, s.P99MS)
	}
}

// A line over the limit is that line's error; the lines around it still run.
func TestParseJobsLongLine(t *testing.T) {
	long := `{"id": "big", "argv": ["true"], "stdin": "` + strings.Repeat("x", 17<<20) + `"}`
	in := `{"id": "a", "argv": ["true"]}` + "\n" + long + "\n" + `{"id": "b", "argv": ["true"]}` + "\n" + long
	jobs, bad, err := ParseJobs(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].ID != "b" {
		t.Errorf("jobs %+v", jobs)
	}
	if len(bad) != 2 || bad[0].JobID != "line-2" || bad[1].JobID != "line-4" {
		t.Fatalf("bad %+v", bad)
	}
	for _, b := range bad {
		if b.ErrorKind != "invalid_input" || !strings.Contains(b.Error, "line limit") {
			t.Errorf("bad %s: %s %q", b.JobID, b.ErrorKind, b.Error)
		}
	}
}

func TestReadLineLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want []string // "!" marks an over-long line
	}{
		{"abc\nde", 3, []string{"abc", "de"}},
		{"abcd\nde\n", 3, []string{"!", "de", ""}},
		{"abc", 3, []string{"abc"}},
		{"abcd", 3, []string{"!"}},
		{"", 3, []string{""}},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
		var got []string
		for {
			line, long, err := readLine(br, tc.max)
			if long {
				got = append(got, "!")
			} else {
				got = append(got, string(line))
			}
			if err != nil {
				break
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q max %d: got %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

// Job inputs stay beneath the input root: no absolute path, no "..", no
// symlink on the way.
func TestJobInputsConfined(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "data", "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "data", "f.txt"), []byte("ok"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "etc"))
	os.Symlink("/etc/passwd", filepath.Join(root, "data", "passwd"))
	os.Symlink(filepath.Join(root, "data"), filepath.Join(root, "alias"))
	for _, host := range []string{"data", "data/f.txt", "data/sub", "./data/f.txt"} {
		j := Job{ID: "x", Argv: []string{"true"}, Inputs: []JobInput{{Host: host}}, inputRoot: root}
		s, err := j.spec(Spec{}, "")
		if err != nil {
			t.Errorf("%q: %v", host, err)
			continue
		}
		if in := s.Inputs[0]; in.Beneath != root || in.Host != host {
			t.Errorf("%q: input %+v, want it confined to %s", host, in, root)
		}
	}
	for _, host := range []string{"../x", "data/../../x", "/etc/passwd", "etc", "etc/passwd", "data/passwd", "alias/f.txt", "missing", ""} {
		j := Job{ID: "x", Argv: []string{"true"}, Inputs: []JobInput{{Host: host}}, inputRoot: root}
		if s, err := j.spec(Spec{}, ""); err == nil {
			t.Errorf("%q was accepted: %+v", host, s.Inputs)
		}
	}
	j := Job{ID: "x", Argv: []string{"true"}, Inputs: []JobInput{{Host: "data"}}}
	if _, err := j.spec(Spec{}, ""); err == nil {
		t.Error("a job input was accepted with no input root")
	}
}

// The base's inputs are not appended to in place by concurrent jobs.
func TestJobSpecKeepsBaseInputs(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "b"), nil, 0o644)
	base := Spec{Inputs: make([]Input, 1, 4)}
	sa, _ := Job{ID: "a", Inputs: []JobInput{{Host: "a"}}, inputRoot: root}.spec(base, "")
	sb, _ := Job{ID: "b", Inputs: []JobInput{{Host: "b"}}, inputRoot: root}.spec(base, "")
	if len(sa.Inputs) != 2 || sa.Inputs[1].Host != "a" || sb.Inputs[1].Host != "b" {
		t.Errorf("job a's inputs %+v, job b's %+v", sa.Inputs, sb.Inputs)
	}
}

// A job's workdir replaces the batch's; without one, the batch's stays.
func TestJobSpecWorkdir(t *testing.T) {
	base := Spec{Workdir: "/home/user"}
	s, err := Job{ID: "a", Argv: []string{"true"}, Workdir: "/work"}.spec(base, "")
	if err != nil || s.Workdir != "/work" {
		t.Errorf("workdir %q (%v), want the job's /work", s.Workdir, err)
	}
	s, err = Job{ID: "b", Argv: []string{"true"}}.spec(base, "")
	if err != nil || s.Workdir != "/home/user" {
		t.Errorf("workdir %q (%v), want the batch's /home/user", s.Workdir, err)
	}
}

func ptr[T any](v T) *T { return &v }

// A zero limit in a job line is refused, never read as the default.
func TestJobZeroLimitsRefused(t *testing.T) {
	for _, l := range []JobLimits{{Timeout: "0s"}, {Memory: "0"}, {CPUs: "0"}, {Output: "0"}, {Pids: ptr(int64(0))}} {
		if _, err := (Job{ID: "x", Argv: []string{"true"}, Limits: l}).spec(Spec{}, ""); err == nil {
			t.Errorf("%+v: err %v, want a refusal of the zero limit", l, err)
		}
	}
}

func TestJobSpecTemplate(t *testing.T) {
	base := Spec{Env: []string{"BASE=1"}}
	base.Policy.Limits.Memory = 1 << 30
	explicit := Spec{Env: []string{"FLAG=1"}}
	explicit.Policy.Limits.Pids = 64
	var gotName string
	var got Spec
	apply := func(name string, e Spec) (Spec, error) {
		gotName, got = name, e
		e.Image = "from-" + name
		return e, nil
	}
	opt := BatchOptions{Base: base, Template: &BatchTemplate{Default: "py", Explicit: explicit, Apply: apply}}

	// A job without a template of its own takes the batch's, on Explicit.
	s, err := opt.jobSpec(Job{ID: "a", Argv: []string{"true"}, Env: []string{"JOB=1"}, Limits: JobLimits{Memory: "256MiB"}})
	if err != nil {
		t.Fatal(err)
	}
	if gotName != "py" || s.Image != "from-py" || !slices.Equal(got.Env, []string{"FLAG=1", "JOB=1"}) ||
		got.Policy.Limits.Memory != 256<<20 || got.Policy.Limits.Pids != 64 || !slices.Equal(got.Argv, []string{"true"}) {
		t.Errorf("Apply got %q, %+v", gotName, got)
	}
	// Its own template wins.
	if s, err = opt.jobSpec(Job{ID: "b", Argv: []string{"true"}, Template: "np"}); err != nil || gotName != "np" || s.Image != "from-np" {
		t.Errorf("job template: %q, %+v, %v", gotName, s, err)
	}
	// Without a default, a job without a template runs on Base.
	opt.Template.Default = ""
	if s, err = opt.jobSpec(Job{ID: "c", Argv: []string{"true"}, Env: []string{"JOB=1"}}); err != nil || s.Policy.Limits.Memory != 1<<30 || !slices.Equal(s.Env, []string{"BASE=1", "JOB=1"}) {
		t.Errorf("no template: %+v, %v", s, err)
	}
	// A batch that resolves no templates refuses a job that names one.
	opt.Template = nil
	if _, err := opt.jobSpec(Job{ID: "d", Argv: []string{"true"}, Template: "py"}); err == nil || !strings.Contains(err.Error(), `template "py"`) {
		t.Errorf("unresolved template: %v", err)
	}
	// A malformed job limit is refused before Apply.
	opt.Template = &BatchTemplate{Apply: func(string, Spec) (Spec, error) { t.Error("Apply called"); return Spec{}, nil }}
	if _, err := opt.jobSpec(Job{ID: "e", Argv: []string{"true"}, Template: "py", Limits: JobLimits{Memory: "lots"}}); err == nil {
		t.Error("a malformed limit was accepted")
	}
}
