package runner

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/engine"
)

// A run refused before it had an id carries only what is known.
func TestErrorResultCarriesOnlyWhatIsKnown(t *testing.T) {
	b, err := json.Marshal(Result{Reason: ReasonError, ExitCode: -1, Error: "bad", ErrorKind: "invalid_input"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"reason":"error","exit_code":-1,"error":"bad","error_kind":"invalid_input"}`; string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
}

// A run that ended keeps exit code 0 and an empty artifact list: absent
// means "not known", never "none".
func TestEndedResultKeepsZeroValues(t *testing.T) {
	b, err := json.Marshal(Result{ID: "x", Reason: ReasonExited, Artifacts: []artifacts.Artifact{}, Rejected: []artifacts.Rejection{}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	json.Unmarshal(b, &m)
	for k, want := range map[string]string{"exit_code": "0", "artifacts": "[]", "rejected": "[]"} {
		if string(m[k]) != want {
			t.Errorf("%s = %s, want %s (in %s)", k, m[k], want, b)
		}
	}
}

// A run with egress carries its proxy's totals, zeros included; one
// without has no egress key.
func TestResultEgressTotals(t *testing.T) {
	var with, without Result
	with.exited(engine.Exit{Egress: &egress.Totals{Refused: 3}}, nil)
	without.exited(engine.Exit{}, nil)
	for _, tc := range []struct {
		res  Result
		want string
	}{
		{with, `"egress":{"allowed":0,"refused":3,"bytes_up":0,"bytes_down":0}`},
		{without, ""},
	} {
		b, err := json.Marshal(tc.res)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); tc.want == "" && strings.Contains(got, `"egress"`) || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s; want %q", got, tc.want)
		}
	}
}

// A Result's times carry no monotonic reading, and its duration is the
// one they give once recorded (as a receipt's verifier computes it).
func TestResultDurationFromRecordedTimes(t *testing.T) {
	start := time.Now()
	var res Result
	res.exited(engine.Exit{Started: start, Finished: start.Add(98*time.Millisecond + 999*time.Microsecond)}, nil)
	if strings.Contains(res.StartedAt.String(), "m=") || strings.Contains(res.FinishedAt.String(), "m=") {
		t.Errorf("times keep a monotonic reading: %v, %v", res.StartedAt, res.FinishedAt)
	}
	b, _ := json.Marshal(res)
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.FinishedAt.Sub(back.StartedAt).Milliseconds(); got != res.DurationMS {
		t.Errorf("duration_ms %d, the recorded times give %d", res.DurationMS, got)
	}
}
