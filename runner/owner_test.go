package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proc/proctest"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// An owner that has exited is gone while it is still a zombie (whose pid
// is not yet free): its run is orphaned and its exec no longer live. A
// running owner is live.
func TestZombieOwnerIsGone(t *testing.T) {
	live := t.TempDir()
	if err := writeOwner(live, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if s := ownerStatus(live); s != "" {
		t.Fatalf("a running owner's run: %q; want live", s)
	}
	_, z := proctest.Zombie(t)
	o := owner{PID: z.Pid, Start: z.StartTime, Deadline: time.Now().Add(time.Hour)}
	dead := t.TempDir()
	b, _ := json.Marshal(o)
	if err := os.WriteFile(filepath.Join(dead, ownerFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if s := ownerStatus(dead); s != lifecycle.Orphaned {
		t.Errorf("a zombie owner's run: %q; want %q", s, lifecycle.Orphaned)
	}
	si := SandboxInfo{Execs: map[string]owner{"e": o}}
	if n := si.liveExecs(); n != 0 {
		t.Errorf("a zombie's exec counts as live")
	}
}
