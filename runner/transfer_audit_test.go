package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/lifecycle"
)

// TestTransferAuditElsewhere: the records of a sandbox this root does not
// hold reach each and this root's audit log; a log that cannot be written
// fails the transfer, after each has had every record.
func TestTransferAuditElsewhere(t *testing.T) {
	root := t.TempDir()
	var got []Transfer
	a := NewTransferAudit(root, "sb-far", func(tr Transfer) { got = append(got, tr) })
	a.Record(Transfer{Direction: DirectionUpload, Path: "/home/user/a", Decision: DecisionAccepted, Size: 3})
	a.Record(Transfer{Direction: DirectionUpload, Path: "/home/user/l", Decision: DecisionRefused, Reason: ReasonSymlink})
	if err := a.Done(nil); err != nil || len(got) != 2 {
		t.Fatalf("Done: %v, each got %d", err, len(got))
	}
	b, err := os.ReadFile(lifecycle.AuditPath(root))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit log: %q", b)
	}
	for i, want := range []string{"/home/user/a", "/home/user/l"} {
		var ev map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil || ev["event"] != "transfer" || ev["sandbox_id"] != "sb-far" || ev["path"] != want {
			t.Errorf("audit line %d: %s (%v)", i, lines[i], err)
		}
	}

	bad := t.TempDir()
	if err := os.Mkdir(filepath.Join(bad, "audit.jsonl"), 0o700); err != nil {
		t.Fatal(err)
	}
	got = nil
	a = NewTransferAudit(bad, "sb-far", func(tr Transfer) { got = append(got, tr) })
	a.Record(Transfer{Direction: DirectionDownload, Path: "/tmp/x", Decision: DecisionAccepted})
	if err := a.Done(nil); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "recording the transfer") || len(got) != 1 {
		t.Errorf("Done with the log a directory: %v, each got %d; want unavailable", err, len(got))
	}
}
