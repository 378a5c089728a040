package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// failingWriter is a stdout that cannot be written.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestSpawnCodes runs the spawn client against spawners that answer, refuse
// or read the request and never answer: once the request has gone out, no
// answer must not read as no spawner, which the host would take as leave
// to start the program a second time.
func TestSpawnCodes(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer string // the spawner's reply; "" closes without one, "-" serves none
		stdout io.Writer
		code   int
		out    string
	}{
		{"started", `{"pid":42}`, nil, 0, agent.Spawned + "42\n"},
		{"not found", `{"errno":2,"error":"no such file"}`, nil, 127, ""},
		{"refused", `{"errno":13,"error":"permission denied"}`, nil, 126, ""},
		{"no spawner", "-", nil, agent.SpawnUnreachable, ""},
		{"read, never answered", "", nil, agent.SpawnUnanswered, ""},
		{"a torn answer", `{"pid":4`, nil, agent.SpawnUnanswered, ""},
		{"started, its word unwritable", `{"pid":42}`, failingWriter{}, agent.SpawnUnanswered, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := filepath.Join(t.TempDir(), "spawner")
			got := make(chan agent.SpawnRequest, 1)
			if c.answer != "-" {
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				go func() {
					conn, err := ln.AcceptUnix()
					if err != nil {
						return
					}
					defer conn.Close()
					var req agent.SpawnRequest
					b, _ := io.ReadAll(conn)
					json.Unmarshal(b, &req)
					got <- req
					conn.Write([]byte(c.answer))
				}()
			}
			var out, errb strings.Builder
			stdout := c.stdout
			if stdout == nil {
				stdout = &out
			}
			code := spawn(addr, []string{"sleep", "5"}, stdout, &errb)
			if code != c.code || out.String() != c.out {
				t.Fatalf("spawn: exit %d, stdout %q, stderr %q; want exit %d, stdout %q", code, out.String(), errb.String(), c.code, c.out)
			}
			if c.answer == "-" {
				return
			}
			if req := <-got; strings.Join(req.Argv, " ") != "sleep 5" {
				t.Errorf("the spawner was asked for %q; want %q", req.Argv, "sleep 5")
			}
		})
	}
}

// TestPipesOutOfDescriptors: an exec whose pipes cannot all be made fails
// with the error, and closes what it had made.
func TestPipesOutOfDescriptors(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	// The open descriptors, found without opening one.
	open := func() (set map[int]bool, high int) {
		set = map[int]bool{}
		for fd := 0; fd < 4096; fd++ {
			if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); e == 0 {
				set[fd], high = true, fd
			}
		}
		return set, high
	}
	// The descriptors open now and not in before. Only new ones count: the
	// runtime may close an earlier test's file under a finalizer meanwhile.
	leaked := func(before map[int]bool) (fds []int) {
		now, _ := open()
		for fd := range now {
			if !before[fd] {
				fds = append(fds, fd)
			}
		}
		return fds
	}
	// Fill the free descriptors below the highest open one, so that the
	// limit alone says how many more there may be.
	_, high := open()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		if int(f.Fd()) > high {
			f.Close()
			break
		}
		defer f.Close()
	}
	before, _ := open()
	// Room for four descriptors: the stdin pipe and one output pipe, not
	// the second output pipe.
	lim := syscall.Rlimit{Cur: uint64(high + 1 + 4), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	x, _, err := pipes(&agent.SpawnArgs{Stdin: true})
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	if err == nil || x != nil {
		t.Fatalf("pipes with four descriptors left: %v, %v; want an error", x, err)
	}
	if fds := leaked(before); len(fds) > 0 {
		t.Errorf("descriptors %v left open by the failure", fds)
	}
	// With room, the same call makes three pipes' worth.
	x, child, err := pipes(&agent.SpawnArgs{Stdin: true})
	if err != nil || x.in == nil || len(x.outs) != 2 || child[2] == nil {
		t.Fatalf("pipes: %+v, %v", x, err)
	}
	closeFiles(child[:])
	x.close()
	if fds := leaked(before); len(fds) > 0 {
		t.Errorf("descriptors %v left open after close", fds)
	}
}
