//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
)

func readResults(t *testing.T, path string) map[string]runner.BatchResult {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]runner.BatchResult{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r runner.BatchResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("result line is not JSON: %v: %q", err, sc.Text())
		}
		if _, dup := out[r.JobID]; dup {
			t.Errorf("job %s has two results", r.JobID)
		}
		out[r.JobID] = r
	}
	return out
}

// TestBatch runs 100+ jobs of every kind with one malformed line, checks
// every result, then resumes after losing some results.
func TestBatch(t *testing.T) {
	dir := t.TempDir()
	jobsPath, outPath := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
	type want struct {
		reason runner.Reason
		code   int
		pass   *bool
	}
	yes, no := true, false
	expect := map[string]want{}
	var lines []string
	add := func(id string, w want, job map[string]any) {
		job["id"] = id
		b, _ := json.Marshal(job)
		lines = append(lines, string(b))
		expect[id] = w
	}
	for i := 0; i < 60; i++ {
		add(fmt.Sprintf("pass-%02d", i), want{runner.ReasonExited, 0, &yes}, map[string]any{
			"argv": []string{"sh", "-c", fmt.Sprintf("echo $((%d * 3))", i)}, "expected_stdout": fmt.Sprintf("%d\n", i*3)})
	}
	for i := 0; i < 20; i++ {
		add(fmt.Sprintf("wrong-%02d", i), want{runner.ReasonExited, 0, &no}, map[string]any{
			"argv": []string{"echo", "nope"}, "expected_stdout": "yes\n"})
	}
	for i := 0; i < 10; i++ {
		add(fmt.Sprintf("exit-%02d", i), want{runner.ReasonExited, i + 1, &no}, map[string]any{
			"argv": []string{"sh", "-c", fmt.Sprintf("exit %d", i+1)}, "expected_stdout": ""})
	}
	for i := 0; i < 6; i++ {
		add(fmt.Sprintf("timeout-%02d", i), want{runner.ReasonTimeout, 137, nil}, map[string]any{
			"argv": []string{"sleep", "60"}, "limits": map[string]any{"timeout": "1s"}})
	}
	for i := 0; i < 6; i++ {
		add(fmt.Sprintf("oom-%02d", i), want{runner.ReasonOOM, 137, nil}, map[string]any{
			"image": defaultRef, "argv": []string{"python3", "-c", "a = bytearray(512 << 20)"}, "limits": map[string]any{"memory": "64MiB"}})
	}
	lines = append(lines[:50], append([]string{`{"id": "broken", "argv": [`}, lines[50:]...)...)
	expect["line-51"] = want{runner.ReasonError, -1, nil}
	os.WriteFile(jobsPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	if len(expect) < 100 {
		t.Fatalf("only %d jobs", len(expect))
	}

	// Results appended to the jobs file itself are refused before a job runs.
	if c := airlock(nil, "batch", jobsPath, "--out", jobsPath, "--image", busybox); c.code != 64 || !strings.Contains(c.stderr, "is the jobs file") {
		t.Errorf("batch --out JOBS: exit %d %s", c.code, c.stderr)
	}
	c := airlock(nil, "batch", jobsPath, "--out", outPath, "--parallel", "4", "--image", busybox, "--engine", engineName, "--isolation", isolationName)
	if c.code != 0 {
		t.Fatalf("batch: exit %d\n%s", c.code, c.stderr)
	}
	got := readResults(t, outPath)
	if len(got) != len(expect) {
		t.Errorf("%d results for %d jobs", len(got), len(expect))
	}
	for id, w := range expect {
		r, ok := got[id]
		switch {
		case !ok:
			t.Errorf("%s: no result", id)
		case r.Reason != w.reason || r.ExitCode != w.code:
			t.Errorf("%s: reason %s exit %d, want %s %d (%s)", id, r.Reason, r.ExitCode, w.reason, w.code, r.Error)
		case (w.pass == nil) != (r.Pass == nil) || w.pass != nil && *w.pass != *r.Pass:
			t.Errorf("%s: pass %v, want %v", id, r.Pass, w.pass)
		}
	}
	if !strings.Contains(c.stderr, "expected stdout: 60 pass, 30 fail") {
		t.Errorf("summary:\n%s", c.stderr)
	}

	// Lose the last ten results, as an interrupted batch would, and resume.
	b, _ := os.ReadFile(outPath)
	kept := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	kept = kept[:len(kept)-10]
	os.WriteFile(outPath, []byte(strings.Join(kept, "")), 0o644)
	before := readResults(t, outPath)
	c = airlock(nil, "batch", jobsPath, "--out", outPath, "--parallel", "4", "--image", busybox, "--engine", engineName, "--isolation", isolationName)
	if c.code != 0 {
		t.Fatalf("resumed batch: exit %d\n%s", c.code, c.stderr)
	}
	after := readResults(t, outPath)
	if len(after) != len(expect) {
		t.Errorf("after resuming: %d results for %d jobs", len(after), len(expect))
	}
	for id, r := range before {
		if after[id].ID != r.ID {
			t.Errorf("%s ran again on resume", id)
		}
	}
	if !strings.Contains(c.stderr, "10 jobs run") {
		t.Errorf("resume summary:\n%s", c.stderr)
	}

	// The whole results file verifies against the jobs file, and a line
	// removed or a verdict edited does not.
	v := airlock(nil, "receipt", "verify", outPath, "--jobs", jobsPath)
	if v.code != 0 || !strings.Contains(v.stdout, fmt.Sprintf("%d lines; %d verified (60 passed, 30 failed their expected stdout), 1 errors with no receipt, 0 NOT verified", len(expect), len(expect)-1)) {
		t.Errorf("receipt verify of the results: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	b, _ = os.ReadFile(outPath)
	all := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	edited := slices.Clone(all)
	for i, l := range edited {
		if strings.Contains(l, `"pass":false`) {
			edited[i] = strings.Replace(l, `"pass":false`, `"pass":true`, 1)
			break
		}
	}
	for name, lines := range map[string][]string{"a line removed": all[:len(all)-1], "the invalid line's error removed": all[1:], "a verdict edited": edited} {
		p := filepath.Join(dir, "tampered.jsonl")
		os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644)
		if v := airlock(nil, "receipt", "verify", p, "--jobs", jobsPath); v.code != 65 || !strings.Contains(v.stderr, "the results do NOT verify") {
			t.Errorf("%s: exit %d\n%s%s", name, v.code, v.stdout, v.stderr)
		}
	}
	noSandboxLeft(t)
}
