package lifecycle

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

const failID = "00112233445566778899"

// breakAudit makes the store's audit log a directory, so no event can be
// appended to it.
func breakAudit(t *testing.T, s *Store) {
	t.Helper()
	os.Remove(s.Audit().Path())
	if err := os.Mkdir(s.Audit().Path(), 0o700); err != nil {
		t.Fatal(err)
	}
}

func wantAuditError(t *testing.T, what string, s *Store, err error) {
	t.Helper()
	var ae *AuditError
	if !errors.As(err, &ae) || !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), s.Audit().Path()) {
		t.Fatalf("%s: %v; want an unavailable *AuditError naming %s", what, err, s.Audit().Path())
	}
}

func TestCorruptStateIsAnErrorNamingTheFile(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path(failID), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(failID); err == nil || !strings.Contains(err.Error(), s.path(failID)) {
		t.Fatalf("Get of a corrupt state: %v; want an error naming %s", err, s.path(failID))
	}
}

func TestUnwritableAuditIsAnError(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	breakAudit(t, s)
	wantAuditError(t, "Append", s, s.Audit().Append(map[string]any{"event": "x"}))
	wantAuditError(t, "Check", s, s.Audit().Check())
	wantAuditError(t, "Move", s, s.Move(failID, Requested, "", nil))
}

func TestBeginRefusesAnUnwritableAuditAndLeavesNothing(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	breakAudit(t, s)
	l, err := s.Begin(context.Background(), failID, nil)
	if l != nil {
		l.Release()
	}
	wantAuditError(t, "Begin", s, err)
	if _, err := os.Stat(s.path(failID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused Begin left its state file: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.dir, failID+"*")); len(left) > 0 {
		t.Errorf("a refused Begin left %v", left)
	}
}

func TestDestroyFreesDespiteAnUnwritableAudit(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []State{Requested, Created, Ready, Running} {
		if err := s.Move(failID, to, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	breakAudit(t, s)
	freed := 0
	err = s.Destroy(context.Background(), failID, "", func() error { freed++; return nil })
	if freed != 1 {
		t.Errorf("freed %d times; an unwritable audit log must not stop a destroy", freed)
	}
	wantAuditError(t, "Destroy", s, err)
	if r, _ := s.Get(failID); r.State != "" {
		t.Errorf("state %s after destroy; want terminated (no record)", r.State)
	}
}

func TestDestroyFreesARunWithUnreadableState(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path(failID), []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	freed := 0
	if err := s.Destroy(context.Background(), failID, "", func() error { freed++; return nil }); err != nil {
		t.Fatal(err)
	}
	if freed != 1 {
		t.Errorf("freed %d times; unreadable state must count as orphaned and be freed", freed)
	}
	var sawOrphaned bool
	for _, ev := range events(t, s) {
		if ev["run_id"] == failID && ev["from"] == string(Orphaned) && ev["to"] == string(Terminating) {
			sawOrphaned = true
		}
	}
	if !sawOrphaned {
		t.Error("the audit log does not say the unreadable run was treated as orphaned")
	}
}
