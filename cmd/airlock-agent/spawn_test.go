package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
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
