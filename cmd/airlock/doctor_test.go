package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/doctor"
	"github.com/airlock-sandbox/airlock/engines"
)

// A damaged <root>/docker-runtime is a FAIL row of the report, with its
// fix, and the doctor exits 69 as for any FAIL: not an error before the
// report that leaves the user with no report at all.
func TestDoctorReportsDamagedRuntimeRecord(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, engines.RuntimeRecord), []byte("../x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := newDoctorCmd(&globals{root: root, stderr: io.Discard})
	cmd.SetArgs([]string{"--json", "--engine", "docker"})
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage = true // as the root command has it
	err := cmd.Execute()
	if code := exitCode(err); code != exitUnavailable {
		t.Errorf("exit %d (%v), want %d", code, err, exitUnavailable)
	}
	var rep struct {
		Checks []doctor.Check `json:"checks"`
		OK     *bool          `json:"ok"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.OK == nil || *rep.OK {
		t.Fatalf("report %s (%v); want {\"checks\":…,\"ok\":false}", out.Bytes(), err)
	}
	for _, c := range rep.Checks {
		if c.Name == "docker runtime" {
			if c.Status != doctor.StatusFail || !strings.Contains(c.Detail, engines.RuntimeRecord) || !strings.Contains(c.Fix, "install-runtime") {
				t.Errorf("docker runtime row %+v; want a FAIL naming the record, with a fix", c)
			}
			return
		}
	}
	t.Errorf("no docker runtime row in %s", out.Bytes())
}
