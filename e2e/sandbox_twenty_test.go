//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// TestSandboxesTwenty makes 20 sandboxes at once through the CLI and runs
// 5 execs in each, the sandboxes' execs all at once. Each exec appends a
// line to a log in its workspace and prints the log, so every result
// shows that its sandbox kept its own state and no other's. Then `airlock
// sandbox rm` removes them all, and each kind of thing a sandbox holds is
// counted: none may be left.
func TestSandboxesTwenty(t *testing.T) {
	const n, execs = 20, 5
	// Counted below are only what was not on the host before.
	base := sandboxes()
	if len(base) > 0 {
		t.Logf("on the host before, not counted: %v", base)
	}
	ids := make([]string, n)
	errs := make([]error, n)
	t.Cleanup(func() {
		var made []string
		for _, id := range ids {
			if id != "" {
				made = append(made, id)
			}
		}
		if len(made) > 0 {
			airlock(nil, append([]string{"sandbox", "rm"}, made...)...)
		}
	})
	all := func(f func(i int) error) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[i] == nil {
					errs[i] = f(i)
				}
			}()
		}
		wg.Wait()
	}
	start := time.Now()
	all(func(i int) error {
		si, err := sbCreateJSON(nil, "--image", busybox, "--label", "e2e=twenty")
		ids[i] = si.ID
		if err == nil && si.State != "ready" {
			err = fmt.Errorf("created %s, state %s", si.ID, si.State)
		}
		return err
	})
	created := time.Since(start)
	start = time.Now()
	all(func(i int) error {
		want := ""
		for j := range execs {
			line := fmt.Sprintf("sandbox %d exec %d", i, j)
			want += line + "\n"
			x := advExec(nil, ids[i], []string{"--timeout", "60s"}, "sh", "-c", `echo "$1" >> log && cat log`, "sh", line)
			if err := x.ended(runner.ReasonExited, 0); err != nil {
				return fmt.Errorf("sandbox %d (%s), exec %d: %w", i, ids[i], j, err)
			}
			if x.res.SandboxID != ids[i] || string(x.res.Stdout.Head) != want {
				return fmt.Errorf("sandbox %d (%s), exec %d: sandbox_id %q, stdout %q, want %q", i, ids[i], j, x.res.SandboxID, x.res.Stdout.Head, want)
			}
		}
		return nil
	})
	ran := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	live := heldBut(base)
	t.Logf("%d sandboxes made in %v, %d execs in %v; holding: %s", n, created.Round(time.Millisecond), n*execs, ran.Round(time.Millisecond), live)
	// What is counted below is there to be counted.
	if live.containers+live.runtimes < n || live.areas < n || live.loops < n || live.records < n || live.states < n || live.supervisors < n || live.mounts < n {
		t.Errorf("%d live sandboxes, but the host holds only: %s", n, live)
	}

	// Four rms at once, five sandboxes each.
	start = time.Now()
	var wg sync.WaitGroup
	rms := make([]cliResult, 4)
	for k := range rms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rms[k] = airlock(nil, append([]string{"sandbox", "rm"}, ids[k*n/4:(k+1)*n/4]...)...)
		}()
	}
	wg.Wait()
	for k, c := range rms {
		if c.code != 0 {
			t.Errorf("sandbox rm %v: exit %d: %s", ids[k*n/4:(k+1)*n/4], c.code, c.stderr)
		}
	}
	removed := time.Since(start)
	// rm returns when the sandbox is gone; supervisors may take a moment
	// to see it.
	var left heldCounts
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = heldBut(base); left == (heldCounts{}) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("removed in %v; left: %s", removed.Round(time.Millisecond), left)
	if left != (heldCounts{}) {
		t.Errorf("left after sandbox rm of all: %s", left)
	}
	for _, id := range ids {
		if l := notIn(sbGone(id), base); len(l) > 0 {
			t.Errorf("sandbox %s: left behind: %v", id, l)
		}
	}
	if c := airlock(nil, "sandbox", "ls", "--json"); c.code != 0 || strings.Contains(c.stdout, "sb-") {
		t.Errorf("sandbox ls after rm: exit %d: %s", c.code, c.stdout)
	}
}
