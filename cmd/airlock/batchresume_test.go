package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A resumed batch reads result lines of any size; a torn last line is not
// a result.
func TestDoneIDsLongLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "results.jsonl")
	big := `{"job_id": "big", "stdout": {"head": "` + strings.Repeat("x", 70<<20) + `"}}`
	os.WriteFile(p, []byte(`{"job_id": "a"}`+"\n"+big+"\n"+`{"job_id": "b"}`+"\n"+`{"job_id": "torn", "std`), 0o644)
	done, err := doneIDs(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 3 || !done["a"] || !done["big"] || !done["b"] {
		t.Errorf("done %v, want a, big and b", done)
	}
}

// batchCmd runs `airlock batch ARGS` on a root of its own, with ctx, and
// returns its stderr and error. Its tests give jobs that are all done (or
// refused), so nothing runs.
func batchCmd(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := newBatchCmd(&globals{root: t.TempDir(), stderr: &stderr})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(&stderr)
	err := cmd.ExecuteContext(ctx)
	return stderr.String(), err
}

// A resume drops a torn last line before appending, so the next result
// does not land on it; a whole result that lost only its newline gets one.
func TestBatchResumeMendsTornTail(t *testing.T) {
	a := `{"job_id":"a"}` + "\n"
	for _, c := range []struct {
		results, want, says string
	}{
		{a + `{"job_id":"b","stdout":{"text":"par`, a, "ended in a torn line (35 bytes"},
		{`{"job_id":"b","std`, "", "ended in a torn line (18 bytes"},
		{a + `{"job_id":"b"} x`, a, "ended in a torn line (16 bytes"},
		{a + `{"job_id":"b"}`, a + `{"job_id":"b"}` + "\n", `after job "b"'s result; added one`},
		{a, a, ""},
		{"", "", ""},
	} {
		dir := t.TempDir()
		jobs, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
		os.WriteFile(jobs, []byte("# no jobs: nothing runs\n"), 0o644)
		os.WriteFile(out, []byte(c.results), 0o644)
		stderr, err := batchCmd(t, context.Background(), jobs, "--out", out)
		if err != nil {
			t.Fatalf("%q: %v", c.results, err)
		}
		if b, _ := os.ReadFile(out); string(b) != c.want {
			t.Errorf("%q: the results file is now %q, want %q", c.results, b, c.want)
		}
		if c.says == "" && strings.Contains(stderr, "--out") || !strings.Contains(stderr, c.says) {
			t.Errorf("%q: stderr %q, want it to say %q", c.results, stderr, c.says)
		}
	}
}

// The default input root, the jobs file's directory, is refused when every
// user may write in it and a job takes inputs; --input-root overrides.
func TestBatchRefusesWorldWritableDefaultRoot(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	jobs, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
	os.WriteFile(out, []byte(`{"job_id":"a"}`+"\n"), 0o644)
	os.WriteFile(jobs, []byte(`{"id":"a","argv":["cat","/work/x"],"inputs":[{"host":"x"}]}`+"\n"), 0o644)
	_, err := batchCmd(t, context.Background(), jobs, "--out", out)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "is writable by every user") || !strings.Contains(err.Error(), "--input-root") {
		t.Errorf("inputs under a world-writable default root: %v, want a usage error naming --input-root", err)
	}
	if _, err := batchCmd(t, context.Background(), jobs, "--out", out, "--input-root", dir); err != nil {
		t.Errorf("with --input-root: %v", err)
	}
	os.WriteFile(jobs, []byte(`{"id":"a","argv":["true"]}`+"\n"), 0o644)
	if _, err := batchCmd(t, context.Background(), jobs, "--out", out); err != nil {
		t.Errorf("no inputs: %v", err)
	}
}

// An interrupted batch says so and exits 130, even with every job done
// or fed; another error of the batch is that error, not an interruption.
func TestBatchInterruptedExits130(t *testing.T) {
	dir := t.TempDir()
	jobs, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
	os.WriteFile(jobs, []byte(`{"id":"a","argv":["true"]}`+"\n"), 0o644)
	os.WriteFile(out, []byte(`{"job_id":"a"}`+"\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stderr, err := batchCmd(t, ctx, jobs, "--out", out)
	var ee *exitErr
	if !errors.As(err, &ee) || ee.code != exitKilled || !strings.Contains(stderr, "batch interrupted") {
		t.Errorf("cancelled: %v, stderr %q; want exit %d saying it was interrupted", err, stderr, exitKilled)
	}
	stderr, err = batchCmd(t, context.Background(), jobs, "--out", out, "--engine", "kube")
	var ue usageError
	if !errors.As(err, &ue) || strings.Contains(stderr, "interrupted") {
		t.Errorf("--engine kube without --template: %v, stderr %q; want its usage error", err, stderr)
	}
}

// The summary's "skipped as already done" counts the jobs of this jobs
// file that were skipped, not every id the results file holds.
func TestBatchSummaryCountsSkippedJobs(t *testing.T) {
	dir := t.TempDir()
	jobs, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
	// One line, not a valid job: it gets a result without any sandbox.
	os.WriteFile(jobs, []byte(`{"id":"x"}`+"\n"), 0o644)
	os.WriteFile(out, []byte(`{"job_id":"other1"}`+"\n"+`{"job_id":"other2"}`+"\n"), 0o644)
	stderr, err := batchCmd(t, context.Background(), jobs, "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "(0 skipped as already done)") {
		t.Errorf("no job of the jobs file was skipped, but the summary says: %q", stderr)
	}
}
