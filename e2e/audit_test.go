//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuditLogRecordsEveryTransitionAndNoOutput(t *testing.T) {
	res, _ := runJSON(t, nil, "--image", busybox, "--", "sh", "-c", "echo the-output-itself; echo sk-abcdefghijklmnopqrstuvwxyz0123 >&2")
	f, err := os.Open(filepath.Join(rootDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var states []string
	var last map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "the-output-itself") || strings.Contains(line, "sk-abcdefghij") {
			t.Errorf("the audit log holds program output: %s", line)
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line is not JSON: %q", line)
		}
		if ev["run_id"] == res.ID && ev["event"] == "transition" {
			states = append(states, ev["to"].(string))
			last = ev
		}
	}
	if got := strings.Join(states, " "); got != "requested created ready running terminating terminated" {
		t.Errorf("transitions of %s: %s", res.ID, got)
	}
	if last["reason"] != "exited" || last["policy_sha256"] == nil || last["stdout"].(map[string]any)["sha256"] != res.Stdout.SHA256 {
		t.Errorf("final event: %v", last)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "state", res.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("a terminated run keeps a state file: %v", err)
	}
}
