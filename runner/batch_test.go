package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/receipt"
	"github.com/airlock-sandbox/airlock/wire"
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
	// An invalid line's result is its line's, whatever id it named; the
	// message names that id.
	wantBad := []struct{ id, says string }{
		{"line-5", "line 5 is not a job"}, {"line-6", "line 6 has no id"}, {"line-7", `line 7 (id "a") repeats`},
		{"line-8", `line 8 (id "c") has no argv`}, {"line-9", `line 9 (id "d") is not a job`},
	}
	if len(bad) != len(wantBad) {
		t.Fatalf("bad %+v", bad)
	}
	for i, b := range bad {
		if b.JobID != wantBad[i].id || b.Reason != ReasonError || b.ErrorKind != "invalid_input" || !strings.HasPrefix(b.Error, wantBad[i].says) {
			t.Errorf("bad[%d] = %s %q, want id %s saying %q", i, b.JobID, b.Error, wantBad[i].id, wantBad[i].says)
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

// A line within the byte limit but of more values than a job can hold is
// refused before it is decoded; a job of the lists' caps still parses.
func TestParseJobsValuesBounded(t *testing.T) {
	many := `{"id": "many", "argv": ["true"` + strings.Repeat(`,""`, 4<<20) + `]}`
	most := `{"id": "most", "argv": ["true"` + strings.Repeat(`,""`, wire.MaxArgv-1) + `], "env": [` + strings.Repeat(`"A=1",`, wire.MaxEnv-1) + `"A=1"]}`
	jobs, bad, err := ParseJobs(strings.NewReader(many + "\n" + most))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != "most" || len(jobs[0].Argv) != wire.MaxArgv {
		t.Errorf("jobs %d", len(jobs))
	}
	if len(bad) != 1 || bad[0].JobID != "line-1" || !strings.Contains(bad[0].Error, "JSON values") {
		t.Fatalf("bad %+v", bad)
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

// No job takes the batch's jobs or results file as an input: not by name,
// not by a hard link, not inside a directory it takes.
func TestBatchInputsNeverJobsOrResults(t *testing.T) {
	roottest.Require(t, "inputs are staged on a tmpfs mount")
	fe := &fakeEngine{run: func(context.Context, *engine.SandboxSpec) (engine.Exit, error) { return engine.Exit{}, nil }}
	r, _ := newFakeRunner(t, fe)
	base := t.TempDir()
	eval := filepath.Join(base, "eval")
	for _, d := range []string{eval, filepath.Join(base, "linked"), filepath.Join(base, "data")} {
		os.MkdirAll(d, 0o755)
	}
	jobsPath, outPath := filepath.Join(eval, "jobs.jsonl"), filepath.Join(eval, "results.jsonl")
	os.WriteFile(jobsPath, []byte(`{"id":"t1","argv":["x"],"expected_stdout":"HIDDEN-ANSWER\n"}`+"\n"), 0o644)
	os.WriteFile(outPath, []byte(`{"job_id":"t1","stdout":{"text":"OTHER-JOB-OUTPUT"}}`+"\n"), 0o600)
	os.Link(outPath, filepath.Join(base, "linked", "r"))
	os.WriteFile(filepath.Join(base, "data", "ok.txt"), []byte("ok"), 0o644)
	jobsInfo, err1 := os.Stat(jobsPath)
	outInfo, err2 := os.Stat(outPath)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	refused := map[string]string{
		"jobs":      "eval/jobs.jsonl",
		"results":   "eval/results.jsonl",
		"their-dir": "eval",
		"hard-link": "linked",
	}
	var jobs []Job
	for id, host := range refused {
		jobs = append(jobs, Job{ID: id, Argv: []string{"cat"}, Inputs: []JobInput{{Host: host, Sandbox: "/work/x"}}})
	}
	jobs = append(jobs, Job{ID: "ok", Argv: []string{"cat"}, Inputs: []JobInput{{Host: "data", Sandbox: "/work/x"}}})
	got := map[string]BatchResult{}
	opt := BatchOptions{Parallel: 2, Base: fakeSpec(), InputRoot: base, JobsFile: jobsInfo, Results: outInfo}
	if err := r.RunBatch(context.Background(), jobs, opt, func(b BatchResult) { got[b.JobID] = b }); err != nil {
		t.Fatal(err)
	}
	for id, host := range refused {
		b := got[id]
		what := "results file"
		if strings.Contains(host, "jobs") {
			what = "jobs file"
		}
		if b.ErrorKind != "invalid_input" || !strings.Contains(b.Error, host) || !strings.Contains(b.Error, "no job may take it as an input") {
			t.Errorf("job %s (input %s): %s %q, want a refusal naming the input", id, host, b.ErrorKind, b.Error)
		}
		if id != "their-dir" && !strings.Contains(b.Error, what) {
			t.Errorf("job %s (input %s): %q, want it to say it is the %s", id, host, b.Error, what)
		}
	}
	if b := got["ok"]; b.Reason != ReasonExited || b.Error != "" {
		t.Errorf("job ok: %s %q", b.Reason, b.Error)
	}
	if n := fe.runs.Load(); n != 1 {
		t.Errorf("%d jobs ran, want only ok", n)
	}
}

// Each job delivers into a directory of its own, named by its run id, so
// that no job can plant a name before another's.
func TestBatchDeliversEachJobApart(t *testing.T) {
	fe := &fakeEngine{run: func(_ context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
		for _, m := range j.Mounts {
			if m.Target == "/out" {
				os.WriteFile(filepath.Join(m.Source, "answer.txt"), []byte(j.Init.Argv[0]+"\n"), 0o644)
				os.WriteFile(filepath.Join(m.Source, "page.html"), []byte("<html><body>"+j.Init.Argv[0]+"</body></html>"), 0o644)
			}
		}
		return engine.Exit{}, nil
	}}
	r, _ := newFakeRunner(t, fe)
	dest, quar := t.TempDir(), t.TempDir()
	base := fakeSpec()
	base.Output = Output{Artifacts: dest, Quarantine: quar}.WithDefaults()
	jobs := []Job{{ID: "evil", Argv: []string{"forged"}}, {ID: "victim", Argv: []string{"honest"}}, {ID: "../up", Argv: []string{"dots"}}}
	got := map[string]BatchResult{}
	if err := r.RunBatch(context.Background(), jobs, BatchOptions{Parallel: 1, Base: base}, func(b BatchResult) { got[b.JobID] = b }); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		b := got[j.ID]
		if b.Error != "" || len(b.Artifacts) != 1 || len(b.Rejected) != 1 {
			t.Fatalf("job %s: artifacts %+v, rejected %+v, error %q", j.ID, b.Artifacts, b.Rejected, b.Error)
		}
		if b.ArtifactsDir != filepath.Join(dest, b.ID) || b.QuarantineDir != filepath.Join(quar, b.ID) {
			t.Errorf("job %s (run %s): artifacts_dir %q, quarantine_dir %q, want the run's own beneath %s and %s", j.ID, b.ID, b.ArtifactsDir, b.QuarantineDir, dest, quar)
		}
		if body, err := os.ReadFile(filepath.Join(b.ArtifactsDir, b.Artifacts[0].Path)); err != nil || string(body) != j.Argv[0]+"\n" {
			t.Errorf("job %s: %s holds %q (%v), want its own answer", j.ID, b.Artifacts[0].Path, body, err)
		}
		if _, err := os.Stat(filepath.Join(b.QuarantineDir, b.Rejected[0].Quarantined)); err != nil {
			t.Errorf("job %s: quarantined %q: %v", j.ID, b.Rejected[0].Quarantined, err)
		}
	}
	for _, d := range []string{dest, quar} {
		ents, _ := os.ReadDir(d)
		if len(ents) != len(jobs) {
			t.Errorf("%s holds %d entries, want one directory per job", d, len(ents))
		}
		for _, e := range ents {
			if !e.IsDir() || len(e.Name()) != 20 {
				t.Errorf("%s holds %q, want only run ids", d, e.Name())
			}
		}
	}
}

// A job takes at most MaxInputs inputs, counted before any is resolved.
func TestJobSpecCapsInputs(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a"), nil, 0o644)
	var ins []JobInput
	for i := range MaxInputs + 1 {
		ins = append(ins, JobInput{Host: "a", Sandbox: fmt.Sprintf("/w/%d", i)})
	}
	j := Job{ID: "x", Argv: []string{"true"}, Inputs: ins, inputRoot: filepath.Join(root, "missing")}
	if _, err := j.spec(Spec{}, ""); err == nil || !strings.Contains(err.Error(), "at most 1024") {
		t.Errorf("%d inputs: %v, want a refusal naming the cap", len(ins), err)
	}
	j.Inputs, j.inputRoot = ins[:MaxInputs], root
	s, err := j.spec(fakeSpec(), "")
	if err != nil {
		t.Fatalf("%d inputs: %v", MaxInputs, err)
	}
	s.normalize()
	if err := checkFiles(s); err != nil {
		t.Errorf("%d inputs: %v", MaxInputs, err)
	}
	s.Inputs = append(s.Inputs, Input{Host: "b", Sandbox: "/w/b"})
	if err := checkFiles(s); err == nil || !strings.Contains(err.Error(), "at most 1024") {
		t.Errorf("%d inputs: %v, want a refusal naming the cap", len(s.Inputs), err)
	}
}

func TestCheckOverlaps(t *testing.T) {
	for _, c := range []struct {
		paths []string
		want  string // "" for none
	}{
		{[]string{"/out", "/work/a", "/work/b"}, ""},
		{[]string{"/a", "/a-b", "/a.b", "/ab", "/a0"}, ""},
		{[]string{"/a", "/a-b", "/a/b"}, "2 at /a/b overlaps 0 at /a"},
		{[]string{"/a/b", "/a-b", "/a"}, "2 at /a overlaps 0 at /a/b"},
		{[]string{"/x", "/a/b/c", "/a-", "/a/b"}, "3 at /a/b overlaps 1 at /a/b/c"},
		{[]string{"/w/x", "/w/y", "/w/x"}, "2 at /w/x overlaps 0 at /w/x"},
		{[]string{"/w", "/w0", "/w/0"}, "2 at /w/0 overlaps 0 at /w"},
	} {
		var claims []sandboxClaim
		for i, p := range c.paths {
			claims = append(claims, sandboxClaim{p, fmt.Sprint(i)})
		}
		err := checkOverlaps(claims)
		if (err == nil) != (c.want == "") || err != nil && err.Error() != c.want {
			t.Errorf("%q: %v, want %q", c.paths, err, c.want)
		}
	}
}

// An invalid line never answers for a job id: its result is its line's,
// so the real job of that id runs, and a resume still runs it.
func TestParseJobsInvalidLineTakesNoJobID(t *testing.T) {
	jobs, bad, err := ParseJobs(strings.NewReader(`{"id":"victim"}` + "\n" + `{"id":"victim","argv":["python3","solve.py"]}` + "\n" +
		`{"id":"line-2","argv":["true"]}` + "\n" + `{"id":"line-9","argv":["true"]}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != "victim" || len(jobs[0].Argv) != 2 {
		t.Errorf("jobs %+v, want the real victim", jobs)
	}
	want := []struct{ id, says string }{
		{"line-1", `line 1 (id "victim") has no argv`},
		{"line-3", `line 3 (id "line-2") takes an id of the form line-N`},
		{"line-4", `line 4 (id "line-9") takes an id of the form line-N`},
	}
	if len(bad) != len(want) {
		t.Fatalf("bad %+v", bad)
	}
	for i, b := range bad {
		if b.JobID != want[i].id || !strings.HasPrefix(b.Error, want[i].says) {
			t.Errorf("bad[%d]: %s %q, want %s saying %q", i, b.JobID, b.Error, want[i].id, want[i].says)
		}
	}
}

// A batch cancelled with a job in flight writes no line for that job, so
// a resume runs it again; the jobs that ended by themselves keep theirs,
// and RunBatch says it was cancelled even with every job fed.
func TestRunBatchCancelledWritesNoLine(t *testing.T) {
	started := make(chan struct{})
	fe := &fakeEngine{run: func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
		if j.Init.Argv[0] == "quick" {
			return engine.Exit{}, nil
		}
		close(started)
		<-ctx.Done()
		return engine.Exit{Code: 137, Killed: true}, nil
	}}
	r, _ := newFakeRunner(t, fe)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := []Job{{ID: "quick", Argv: []string{"quick"}}, {ID: "long", Argv: []string{"sleep"}}}
	var got []BatchResult
	quickDone := make(chan struct{})
	go func() {
		<-started
		<-quickDone
		cancel()
	}()
	err := r.RunBatch(ctx, jobs, BatchOptions{Parallel: 2, Base: fakeSpec()}, func(b BatchResult) {
		got = append(got, b)
		if b.JobID == "quick" {
			close(quickDone)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RunBatch: %v, want the cancellation", err)
	}
	if len(got) != 1 || got[0].JobID != "quick" || got[0].Reason != ReasonExited {
		t.Errorf("lines %+v, want only quick's", got)
	}
}

// BatchCeilings bound what a job asks, whatever gave it; nil bounds
// nothing, and an empty Egress allows none.
func TestJobSpecCeilings(t *testing.T) {
	base := Spec{}
	base.Policy.Limits.Memory = 256 << 20
	job := Job{ID: "a", Argv: []string{"true"}, Limits: JobLimits{Memory: "1GiB"}, AllowHost: []string{"pypi.org"}}
	if s, err := (BatchOptions{Base: base}).jobSpec(job); err != nil || s.Policy.Limits.Memory != 1<<30 {
		t.Errorf("no ceilings: %+v, %v; want the job's own memory", s.Policy.Limits, err)
	}
	c := &BatchCeilings{}
	c.Limits.Memory = 256 << 20
	_, err := BatchOptions{Base: base, Ceilings: c}.jobSpec(job)
	for _, w := range []string{"memory 1GiB is above this batch's ceiling of 256MiB", `allow_host "pypi.org" is not on this batch's allowlist (none`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("over the ceilings: %v, want it to say %q", err, w)
		}
	}
	job.Limits.Memory, job.AllowHost = "128MiB", nil
	if s, err := (BatchOptions{Base: base, Ceilings: c}).jobSpec(job); err != nil || s.Policy.Limits.Memory != 128<<20 {
		t.Errorf("within the ceilings: %+v, %v", s.Policy.Limits, err)
	}
	// A batch's one template is the only one a job may name.
	c.Template = "py"
	apply := func(name string, e Spec) (Spec, error) { return e, nil }
	opt := BatchOptions{Base: base, Ceilings: c, Template: &BatchTemplate{Default: "py", Apply: apply}}
	if _, err := opt.jobSpec(Job{ID: "b", Argv: []string{"true"}, Template: "np"}); err == nil || !strings.Contains(err.Error(), `may not name another`) {
		t.Errorf("another template: %v", err)
	}
	if _, err := opt.jobSpec(Job{ID: "c", Argv: []string{"true"}, Template: "py"}); err != nil {
		t.Errorf("the batch's template: %v", err)
	}
}

// A job destroyed by another airlock process has no receipt, so its line
// claims no verdict: receipt verify takes it as an unsigned error, and a
// batch with one still verifies.
func TestBatchDestroyedJobClaimsNoVerdict(t *testing.T) {
	fe := &fakeEngine{}
	r, root := newFakeRunner(t, fe)
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	fe.run = func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
		if err := lc.Destroy(context.Background(), j.ID, "", func() error { return nil }); err != nil {
			return engine.Exit{}, err
		}
		return engine.Exit{Code: 137}, nil
	}
	want := "ok\n"
	var got BatchResult
	jobs := []Job{{ID: "d", Argv: []string{"true"}, ExpectedStdout: &want}}
	if err := r.RunBatch(context.Background(), jobs, BatchOptions{Parallel: 1, Base: fakeSpec()}, func(b BatchResult) { got = b }); err != nil {
		t.Fatal(err)
	}
	if got.Reason != ReasonDestroyed || got.Receipt != nil || got.Pass != nil {
		t.Fatalf("reason %s, receipt %v, pass %v; want destroyed, no receipt, no verdict", got.Reason, got.Receipt != nil, got.Pass)
	}
	b, _ := json.Marshal(got)
	rep, err := receipt.CheckResults(bytes.NewReader(append(b, '\n')), nil, map[string]*string{"d": &want})
	if err != nil || rep.UnsignedErrors != 1 || len(rep.Missing) != 0 {
		t.Errorf("receipt verify of the line: %+v, %v", rep, err)
	}
}
