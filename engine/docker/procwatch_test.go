package docker

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// openFDs counts this process's open descriptors, and the pidfds among them.
func openFDs(t *testing.T) (all, pidfds int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.Contains(l, "pidfd") {
			pidfds++
		}
	}
	return len(ents), pidfds
}

func pidfds(t *testing.T) int {
	t.Helper()
	_, n := openFDs(t)
	return n
}

func (ws *procWatches) held() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.m)
}

// A server opens a sandbox for every request: all its handles share one
// pidfd and one goroutine, released once the container's process exits.
func TestOpenSharesOneWatch(t *testing.T) {
	// A real sleep stands for the container's process. os.Process holds a
	// pidfd of its own until Wait.
	pfdNone := pidfds(t)
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	c := map[string]any{
		"Id":         "cid",
		"Config":     map[string]any{"User": "65534:65534", "Labels": map[string]string{LabelTimeout: "1m"}},
		"HostConfig": map[string]any{},
		"State":      map[string]any{"Running": true, "Status": "running", "Pid": sleep.Process.Pid, "StartedAt": "2024-01-01T00:00:00Z"},
	}
	_, e := startFake(t, map[string]http.HandlerFunc{
		"GET /containers/json":     jsonReply([]map[string]any{{"Id": "cid", "Names": []string{"/airlock-sb"}, "Labels": map[string]string{LabelID: "sb"}}}),
		"GET /containers/cid/json": jsonReply(c),
	})
	ctx := context.Background()
	open := func() *sandbox {
		t.Helper()
		sb, err := e.Open(ctx, "sb")
		if err != nil {
			t.Fatal(err)
		}
		return sb.(*sandbox)
	}
	first := open() // and the client's connection
	runtime.GC()
	fd0, pfd0 := openFDs(t)
	g0 := runtime.NumGoroutine()
	var last *sandbox
	for range 200 {
		last = open()
	}
	runtime.GC()
	if last.proc != first.proc {
		t.Error("handles of one sandbox watch its process apart")
	}
	fd, pfd := openFDs(t)
	if pfd != pfd0 {
		t.Errorf("200 opens: %d pidfds, from %d", pfd, pfd0)
	}
	// A connection or two may come and go.
	if fd > fd0+4 {
		t.Errorf("200 opens: %d fds, from %d", fd, fd0)
	}
	if n := runtime.NumGoroutine(); n > g0+8 {
		t.Errorf("200 opens: %d goroutines, from %d", n, g0)
	}
	if first.proc.exited() {
		t.Fatal("a live process's watch reports an exit")
	}

	// Ended from outside, as by another airlock's Destroy.
	sleep.Process.Kill()
	sleep.Wait()
	for deadline := time.Now().Add(10 * time.Second); pidfds(t) != pfdNone || e.procs.held() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after the exit: %d pidfds (want %d), %d watches held", pidfds(t), pfdNone, e.procs.held())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, s := range []*sandbox{first, last} {
		select {
		case <-s.proc.ended():
		default:
			t.Error("a handle's watch did not end with its process")
		}
		if !s.proc.exited() {
			t.Error("a handle's watch does not report the exit")
		}
		if s.ended() == nil {
			t.Error("a handle of a sandbox whose process exited is not lost")
		}
	}
	// The fake still says it runs: the gone pid is refused, not watched.
	if _, err := e.Open(ctx, "sb"); err == nil {
		t.Error("Open watched a process that is gone")
	}
	if n := e.procs.held(); n != 0 {
		t.Errorf("%d watches held after a failed open", n)
	}
}
