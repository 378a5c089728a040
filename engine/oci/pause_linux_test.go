package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/isolation"
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
// file system of airlock's root, beside the room promised to checkpoints
// being written, else it is refused before runsc writes.
func TestRoomFor(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if err := roomFor(dir, 0, 0, 0, "pausing x"); err != nil {
		t.Fatalf("nothing needed: %v", err)
	}
	for _, c := range []struct{ need, reserve, promised int64 }{{free + 1<<30, 0, 0}, {0, free + 1<<30, 0}, {free / 2, free, 0}, {free / 2, 0, free * 3 / 4}} {
		err := roomFor(dir, c.need, c.reserve, c.promised, "pausing x")
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "pausing x needs about") || !strings.Contains(err.Error(), "destroy paused sandboxes") {
			t.Errorf("need %d, reserve %d, promised %d of %d free: %v; want unavailable, saying how to make room", c.need, c.reserve, c.promised, free, err)
		}
	}
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.reserveRoom("sb-no-such-sandbox", dir, "pausing x"); !errdefs.IsUnavailable(err) {
		t.Errorf("a sandbox with no cgroup: %v; want unavailable", err)
	}
}

// Room reserved for a checkpoint being written is set aside for every
// other checkpoint on that file system, from any engine on the root,
// until it is released or its holder is gone: checkpoints begun at once
// cannot together eat into the reserve.
func TestReserveSetsRoomAside(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	free := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	one, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	f := free()
	r, err := one.reserve(dir, f/2, 0, "pausing a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.reserve(dir, f*3/4, 0, "pausing b"); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "promised to checkpoints being written") {
		t.Errorf("a second checkpoint, which fits alone but not beside the first's room: %v; want it refused, naming the room promised", err)
	}
	r.Release()
	r2, err := other.reserve(dir, f*3/4, 0, "pausing b")
	if err != nil {
		t.Fatalf("once the first's room is released: %v", err)
	}
	r2.Release()

	// A reservation whose holder died (its file unlocked) is dropped.
	b, _ := json.Marshal(reservationEntry{Need: f, Dev: devOf(t, dir), Dir: dir})
	dead := filepath.Join(one.reservationsDir(), "r-dead")
	if err := os.WriteFile(dead, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r3, err := other.reserve(dir, f/2, 0, "pausing c")
	if err != nil {
		t.Fatalf("beside a dead process's reservation: %v", err)
	}
	r3.Release()
	if ents, _ := os.ReadDir(one.reservationsDir()); len(ents) != 0 {
		t.Errorf("reservations left: %v", ents)
	}
}

// What a checkpoint wrote already counts against its reservation, not
// beside it.
func TestPromisedLessWritten(t *testing.T) {
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := e.reserve(dir, 8<<20, 0, "pausing a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if got := promisedOn(e.reservationsDir(), devOf(t, dir)); got != 8<<20 {
		t.Errorf("promised before writing: %d; want %d", got, 8<<20)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), bytes.Repeat([]byte{1}, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := promisedOn(e.reservationsDir(), devOf(t, dir)); got < 5<<20 || got > 6<<20 {
		t.Errorf("promised after writing 2 MiB of 8: %d; want about 6 MiB", got)
	}
	if got := promisedOn(e.reservationsDir(), devOf(t, dir)+1); got != 0 {
		t.Errorf("promised on another file system: %d; want 0", got)
	}
}

func devOf(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
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

// A checkpoint restores only under the runsc that wrote it: after runsc
// changed (make setup), a resume is refused before runsc restore runs,
// as lost, saying the sandbox cannot be resumed; it stays paused.
func TestResumeRefusesAnotherRunsc(t *testing.T) {
	root := t.TempDir()
	calls := filepath.Join(root, "calls")
	runsc := filepath.Join(root, "runsc")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\necho 'runsc version new'\n"
	if err := os.WriteFile(runsc, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	e, err := New(root, WithRunsc(runsc))
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb-paused"
	st, _ := json.Marshal(sandboxState{ID: id, Mode: isolation.GVisor, Paused: true})
	cfg, _ := json.Marshal(specs.Spec{Process: &specs.Process{Args: []string{"/init"}}})
	dir := e.checkpointDir(id)
	for path, b := range map[string][]byte{
		filepath.Join(e.bundleDir(id), stateFile):     st,
		filepath.Join(e.bundleDir(id), "config.json"): cfg,
		filepath.Join(dir, checkpointDone):            nil,
		filepath.Join(dir, checkpointRuntime):         []byte("runsc version old"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err = e.Resume(t.Context(), id)
	if !errors.Is(err, engine.ErrSandboxLost) || !strings.Contains(err.Error(), "runsc version old") || !strings.Contains(err.Error(), "cannot be resumed") || !strings.Contains(err.Error(), "airlock sandbox rm "+id) {
		t.Fatalf("Resume under another runsc: %v; want it refused, naming both versions and the fix", err)
	}
	if b, _ := os.ReadFile(calls); strings.TrimSpace(string(b)) != "--version" {
		t.Errorf("runsc was run with %q; want --version alone", b)
	}
	if paused, err := e.Paused(t.Context(), id); !paused || err != nil || !e.checkpointed(id) {
		t.Errorf("Paused = %v, %v, checkpoint whole %v; want the sandbox paused, its checkpoint kept", paused, err, e.checkpointed(id))
	}
}

// A checkpoint's timeout grows with the memory it writes.
func TestCheckpointTimeout(t *testing.T) {
	if got := checkpointTimeout(0); got != cleanupTimeout {
		t.Errorf("checkpointTimeout(0) = %v; want %v", got, cleanupTimeout)
	}
	if got := checkpointTimeout(8 << 30); got < cleanupTimeout+8*time.Minute {
		t.Errorf("checkpointTimeout(8 GiB) = %v; want at least %v", got, cleanupTimeout+8*time.Minute)
	}
}
