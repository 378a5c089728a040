package runner

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// A record past maxRecordBytes is refused before it is written: it would
// be parsed at every supervisor tick, exec and listing.
func TestRecordCap(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(sandboxesDir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	id := "sb-00112233445566778899"
	si := SandboxInfo{ID: id, Labels: map[string]string{}}
	for len(si.DownloadTypes)*len(`"text/plain",`) <= maxRecordBytes {
		si.DownloadTypes = append(si.DownloadTypes, "text/plain")
	}
	if err := writeInfo(root, &si); !errdefs.IsInternal(err) {
		t.Fatalf("a record over the cap: %v, want an internal error", err)
	}
	if _, err := os.Stat(infoPath(root, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the record was written: %v", err)
	}
	si.DownloadTypes = si.DownloadTypes[:64]
	if err := writeInfo(root, &si); err != nil {
		t.Fatal(err)
	}
}

// The supervisor parses its sandbox's record again only once the file
// has changed.
func TestRecordCacheParsesChangesOnly(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(sandboxesDir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	id := "sb-00112233445566778899"
	t0 := time.Now().UTC().Truncate(time.Second)
	if err := writeInfo(root, &SandboxInfo{ID: id, Labels: map[string]string{}, LastActivity: t0}); err != nil {
		t.Fatal(err)
	}
	rc := &recordCache{root: root, id: id}
	for i := range 5 {
		si, cached, err := rc.read()
		if err != nil || !si.LastActivity.Equal(t0) || cached != (i > 0) {
			t.Fatalf("read %d: %+v, cached %v, %v", i, si, cached, err)
		}
	}
	if rc.parses != 1 {
		t.Fatalf("5 reads of an unchanged record parsed it %d times, want 1", rc.parses)
	}
	t1 := t0.Add(time.Hour)
	if err := updateInfo(root, id, func(si *SandboxInfo) error { si.LastActivity = t1; return nil }); err != nil {
		t.Fatal(err)
	}
	if si, cached, err := rc.read(); err != nil || cached || !si.LastActivity.Equal(t1) || rc.parses != 2 {
		t.Fatalf("after a change: %v, cached %v, %v, %d parses", si.LastActivity, cached, err, rc.parses)
	}
	rc.forget()
	if _, cached, _ := rc.read(); cached || rc.parses != 3 {
		t.Fatalf("after forget: cached %v, %d parses", cached, rc.parses)
	}
	if err := os.Remove(infoPath(root, id)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rc.read(); !errdefs.IsNotFound(err) {
		t.Fatalf("a removed record: %v", err)
	}
}

// An idle timeout past what a Duration holds (a record not made by this
// package's Create, which caps it at a year) leaves the TTL as the
// deadline, not one wrapped into the past.
func TestDeadlineSaturates(t *testing.T) {
	now := time.Now()
	si := SandboxInfo{ExpiresAt: now.Add(time.Hour), LastActivity: now, IdleTimeoutMS: math.MaxInt64}
	if dl := si.Deadline(now); !dl.Equal(si.ExpiresAt) {
		t.Errorf("deadline %v; want the TTL's %v", dl, si.ExpiresAt)
	}
}
