package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// A record whose owner has no start time (a torn or hand-edited record:
// the zero value, or a pid without its start) names nobody: procStart of
// a missing or exited process is 0 too, so comparing start times alone
// would count it alive. A run's owner, a sandbox's creator and an exec's
// process follow the same rule.
func TestOwnerWithoutStartIsGone(t *testing.T) {
	_, z := proctest.Zombie(t)
	for _, o := range []owner{{}, {PID: z.Pid}, {PID: os.Getpid()}, {Start: procStart(os.Getpid())}} {
		if o.alive() {
			t.Errorf("owner %+v counts as alive", o)
		}
		now := time.Now()
		si := SandboxInfo{Execs: map[string]owner{"e": o}, IdleTimeoutMS: 1000, LastActivity: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}
		if n := si.liveExecs(); n != 0 {
			t.Errorf("an exec of %+v counts as live", o)
		}
		if dl := si.Deadline(now); !dl.Before(now) {
			t.Errorf("an exec of %+v holds off the idle timeout: deadline %v, now %v", o, dl, now)
		}
	}
	if o := (owner{PID: os.Getpid(), Start: procStart(os.Getpid())}); !o.alive() {
		t.Errorf("the test's own process %+v counts as gone", o)
	}
}

// zeroCreatorSandbox records a created sandbox whose record names no
// creator (pid 0, start 0) and a day to live.
func zeroCreatorSandbox(t *testing.T, root string) string {
	t.Helper()
	const id = "sb-0123456789abcdef0123"
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.MoveThrough(id, lifecycle.Requested, lifecycle.Created); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(sandboxesDir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	si := SandboxInfo{ID: id, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(24 * time.Hour)}
	b, _ := json.Marshal(si)
	if err := os.WriteFile(infoPath(root, id), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// A sweep takes a sandbox mid-create whose record names no creator as
// orphaned, as it does a run whose owner file says nobody, rather than
// keeping it until its TTL.
func TestReapSandboxWithoutCreator(t *testing.T) {
	root := t.TempDir()
	id := zeroCreatorSandbox(t, root)
	rep, err := Reap(context.Background(), root, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Reaped) != 1 || rep.Reaped[0] != id || rep.Live != 0 {
		t.Errorf("reaped %v, %d live; want %s reaped", rep.Reaped, rep.Live, id)
	}
	endedOrphaned(t, root, id)
}

// The sandbox's supervisor ends it at once too.
func TestSuperviseEndsSandboxWithoutCreator(t *testing.T) {
	root := t.TempDir()
	r, err := New(WithRoot(root), WithEngine(&fakeSandboxer{}))
	if err != nil {
		t.Fatal(err)
	}
	id := zeroCreatorSandbox(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Supervise(ctx, id); err != nil {
		t.Fatalf("supervise: %v", err)
	}
	endedOrphaned(t, root, id)
}

// endedOrphaned checks that sandbox id is gone, ended as orphaned.
func endedOrphaned(t *testing.T, root, id string) {
	t.Helper()
	if st := stateOf(t, root, id); st != "" {
		t.Errorf("state %q; want the sandbox gone", st)
	}
	audit, _ := os.ReadFile(filepath.Join(root, "audit.jsonl"))
	if !strings.Contains(string(audit), `"to":"orphaned"`) {
		t.Errorf("no orphaned transition in %s", audit)
	}
}
