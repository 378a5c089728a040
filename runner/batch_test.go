package runner

import (
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
	s, err := Job{ID: "x", Argv: []string{"true"}, Limits: JobLimits{Timeout: "2s", Memory: "64MiB", CPUs: "0.5", Pids: 32, Output: "4KiB"}}.spec(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	l := s.Policy.Limits
	if l.Timeout.Seconds() != 2 || l.Memory != 64<<20 || l.CPUs != 500 || l.Pids != 32 || l.Output != 4096 {
		t.Errorf("limits %+v", l)
	}
	if _, err := (Job{ID: "x", Argv: []string{"true"}, Limits: JobLimits{Memory: "lots"}}).spec(Spec{}); err == nil {
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
