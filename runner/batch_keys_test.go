package runner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/wire"
)

// parseOneLine parses one batch line and says whether it was taken as
// a job (and which) or refused as an invalid line.
func parseOneLine(t *testing.T, line string) ([]Job, []BatchResult) {
	t.Helper()
	jobs, bad, err := ParseJobs(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return jobs, bad
}

// A batch line's keys are read as the API reads a body's: a field's
// name in another case, or a key given twice, makes the line invalid.
func TestParseJobsReadsKeysAsWritten(t *testing.T) {
	for _, line := range []string{
		`{"id":"a","argv":["true"],"LIMITS":{"MEMORY":"64GiB"}}`,
		`{"ID":"a","Argv":["true"]}`,
		`{"id":"a","argv":["true"],"Allow_Host":["pypi.org"]}`,
		`{"id":"a","argv":["true"],"limits":{"memory":"64MiB","memory":"64GiB"}}`,
		`{"id":"a","argv":["true"],"expected_stdout":"ok\n","expected_stdout":"bad\n"}`,
		`{"id":"a","argv":["true"],"argv":["rm","-rf","/work"]}`,
	} {
		// The shared check the API applies refuses the line.
		if err := wire.CheckKeys([]byte(line), &Job{}); err == nil {
			t.Fatalf("wire.CheckKeys(%s) took it; the test's premise is wrong", line)
		}
		jobs, bad := parseOneLine(t, line)
		if len(jobs) != 0 || len(bad) != 1 {
			var got any = jobs
			if len(jobs) == 1 {
				got = map[string]any{"id": jobs[0].ID, "argv": jobs[0].Argv, "limits": jobs[0].Limits, "allow_host": jobs[0].AllowHost}
			}
			t.Errorf("batch line %s: taken as job %+v; want an invalid_input line naming the key (as POST /v1/runs refuses it)", line, got)
		}
	}
}

// A line holding more than its job is invalid: nothing after it is lost
// without a word.
func TestParseJobsRefusesTrailingData(t *testing.T) {
	for _, line := range []string{
		`{"id":"a","argv":["true"]} {"id":"b","argv":["false"]}`,
		`{"id":"a","argv":["true"]}{"id":"b","argv":["false"]}`,
		`{"id":"a","argv":["true"]} this is not JSON`,
		`{"id":"a","argv":["true"]}]`,
	} {
		jobs, bad := parseOneLine(t, line)
		if len(bad) != 1 || len(jobs) != 0 {
			ids := []string{}
			for _, j := range jobs {
				ids = append(ids, j.ID)
			}
			t.Errorf("batch line %s: jobs %v and %d invalid lines; want the line refused as invalid_input (trailing data after the job)", line, ids, len(bad))
		}
	}
}

// A job's cpus is a number or a string, as the API's is.
func TestParseJobsTakesCPUsAsNumber(t *testing.T) {
	var p wire.Policy
	if err := json.Unmarshal([]byte(`{"cpus":2}`), &p); err != nil || p.CPUs != "2" {
		t.Fatalf("premise: the API's policy takes cpus 2: %v %q", err, p.CPUs)
	}
	jobs, bad := parseOneLine(t, `{"id":"a","argv":["true"],"limits":{"cpus":2}}`)
	if len(jobs) != 1 {
		msg := ""
		if len(bad) == 1 {
			msg = bad[0].Error
		}
		t.Errorf("a job line with limits.cpus 2 (a number, as the API takes it): refused: %s", msg)
	}
}
