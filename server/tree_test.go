package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

func TestIsTar(t *testing.T) {
	for v, want := range map[string]bool{
		"application/x-tar": true, "application/x-tar; charset=binary": true, "text/html, application/x-tar;q=0.9": true,
		"": false, "application/octet-stream": false, "application/x-tarx": false, "application/json": false,
	} {
		if got := isTar(v); got != want {
			t.Errorf("isTar(%q) = %v", v, got)
		}
	}
}

// The records spooled come back as one runner.TreeReport, in order.
func TestReportSpool(t *testing.T) {
	s, err := New(Options{Service: service.New(t.TempDir(), &fuzztest.NoEngines{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 3000} {
		rs, err := s.newReportSpool()
		if err != nil {
			t.Fatal(err)
		}
		rec := rs.record(s)
		for i := range n {
			tr := runner.Transfer{Direction: runner.DirectionUpload, Path: "/tmp/f" + string(rune('a'+i%26)), Decision: runner.DecisionAccepted}
			if i%2 == 1 {
				tr.Decision, tr.Reason, tr.Detail = runner.DecisionRefused, "symlink", "a \"symlink\",\nwith a newline"
			}
			rec(tr)
		}
		var out bytes.Buffer
		err = rs.report(&out, runner.TreeSummary{Files: n, Stopped: "too_many"})
		rs.Close()
		if err != nil {
			t.Fatalf("%d records: %v", n, err)
		}
		var rep runner.TreeReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%d records: %v: %s", n, err, out.String())
		}
		if len(rep.Transfers) != n || rep.Summary.Files != n || rep.Summary.Stopped != "too_many" {
			t.Fatalf("%d records: %+v", n, rep.Summary)
		}
		for i, tr := range rep.Transfers {
			if (i%2 == 1) != (tr.Decision == runner.DecisionRefused) {
				t.Fatalf("record %d out of order: %+v", i, tr)
			}
		}
	}
}
