package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestOlderAgent: only an agent's ready frame reads as an agent from
// before the spawner, which started nothing; anything else an exit 0
// comes with may hide a started program.
func TestOlderAgent(t *testing.T) {
	frame := func(typ byte, payload string) []byte {
		var b bytes.Buffer
		agent.Write(&b, typ, 0, []byte(payload))
		return b.Bytes()
	}
	for _, c := range []struct {
		name string
		out  []byte
		want bool
	}{
		{"a ready frame", frame(agent.Ready, agent.Version), true},
		{"nothing", nil, false},
		{"the spawner's word", []byte(agent.Spawned + "42\n"), false},
		{"another frame", frame(agent.Started, "\x00\x00\x00\x2a"), false},
		{"a torn ready frame", frame(agent.Ready, agent.Version)[:5], false},
	} {
		if got := olderAgent(c.out); got != c.want {
			t.Errorf("%s: olderAgent = %v; want %v", c.name, got, c.want)
		}
	}
}

// TestSpawnOutputBounded: what a process of the sandbox writes into the
// spawn client's streams (through /proc/PID/fd) is not held whole by the
// host, nor copied into the error and the audit log. A fake control
// socket stands for the sentry: it writes 16 MiB into the exec's stderr
// and reports exit 0 with no word from the spawner.
func TestSpawnOutputBounded(t *testing.T) {
	const n, stderrFD = 16 << 20, 2
	sock := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	written := make(chan struct{})
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			buf, oob := make([]byte, 1<<16), make([]byte, 256)
			k, oobn, _, _, _ := c.ReadMsgUnix(buf, oob)
			var req struct{ Method string }
			json.Unmarshal(buf[:k], &req)
			if req.Method == "containerManager.ExecuteAsync" {
				m, _ := unix.ParseSocketControlMessage(oob[:oobn])
				fds, _ := unix.ParseUnixRights(&m[0])
				go func() {
					f := os.NewFile(uintptr(fds[stderrFD]), "stderr")
					f.Write(bytes.Repeat([]byte("e"), n))
					f.Close()
					close(written)
				}()
				c.Write([]byte(`{"success":true,"result":42}`))
			} else {
				<-written
				c.Write([]byte(`{"success":true,"result":0}`))
			}
			c.Close()
		}
	}()
	s := &sandbox{e: &Engine{log: slog.New(slog.DiscardHandler)}, st: sandboxState{ID: "t", Control: sock}, bundle: t.TempDir()}
	q := s.process
	q.Args = []string{"sleep", "100"}
	_, _, err = s.execSpawn(t.Context(), &q)
	if err == nil || len(err.Error()) > 2*spawnOutput {
		t.Fatalf("the spawn's error holds %d bytes of the sandbox's writing: %.200v", len(fmt.Sprint(err)), err)
	}
}

// A pause needs room for its checkpoint and the reserve beside it on the
// file system of airlock's root, else it is refused before runsc writes.
func TestRoomFor(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if err := roomFor(dir, 0, 0, "pausing x"); err != nil {
		t.Fatalf("nothing needed: %v", err)
	}
	for _, c := range []struct{ need, reserve int64 }{{free + 1<<30, 0}, {0, free + 1<<30}, {free / 2, free}} {
		err := roomFor(dir, c.need, c.reserve, "pausing x")
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "pausing x needs about") || !strings.Contains(err.Error(), "destroy paused sandboxes") {
			t.Errorf("need %d, reserve %d of %d free: %v; want unavailable, saying how to make room", c.need, c.reserve, free, err)
		}
	}
	if err := roomToCheckpoint("sb-no-such-sandbox", dir, "pausing x"); !errdefs.IsUnavailable(err) {
		t.Errorf("a sandbox with no cgroup: %v; want unavailable", err)
	}
}

// A used checkpoint handed to a process of its own is removed by it,
// whether or not this process waits.
func TestRemoveDetached(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".used-sb-x-1")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pages.img", "sub/state"} {
		if err := os.WriteFile(filepath.Join(dir, f), make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !removeDetached(dir) {
		t.Fatal("rm did not start")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Lstat(dir); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there after 10s", dir)
		}
	}
}
