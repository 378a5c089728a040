package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// frame is one stdcopy frame of a multiplexed exec stream.
func frame(stream byte, b []byte) []byte {
	h := []byte{stream, 0, 0, 0}
	return append(binary.BigEndian.AppendUint32(h, uint32(len(b))), b...)
}

// execFake is a dockerd whose execs in container "cid" fail to start
// (no pid, the runtime's error on stdout) for the first failures, then
// run and print "ok". It counts the execs created.
func execFake(t *testing.T, failures int) (*sandbox, *atomic.Int32) {
	t.Helper()
	var made atomic.Int32
	started := func(n int32) bool { return int(n) > failures }
	routes := map[string]http.HandlerFunc{
		"POST /containers/cid/exec": func(w http.ResponseWriter, r *http.Request) {
			jsonReply(map[string]string{"Id": fmt.Sprintf("e%d", made.Add(1))})(w, r)
		},
		"GET /containers/cid/json": jsonReply(map[string]any{"Id": "cid", "State": map[string]any{"Running": true, "Status": "running"}}),
	}
	for n := int32(1); n <= 4; n++ {
		routes[fmt.Sprintf("POST /exec/e%d/start", n)] = func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			conn.Write([]byte("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"))
			if started(n) {
				conn.Write(frame(2, binary.NativeEndian.AppendUint32(nil, 4242)))
				conn.Write(frame(1, []byte("ok\n")))
			} else {
				conn.Write(frame(1, []byte("OCI runtime exec failed: exec failed: unable to start container process: exit status 128\r\n")))
			}
			// End the stream, then read what the client sent to its end: a
			// close with unread input would reset the connection, and the
			// client could lose the output to the reset.
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, conn)
		}
		ins := map[string]any{"Running": false, "Pid": 0, "ExitCode": 126}
		if started(n) {
			ins = map[string]any{"Running": false, "Pid": 4242, "ExitCode": 0}
		}
		routes[fmt.Sprintf("GET /exec/e%d/json", n)] = jsonReply(ins)
	}
	_, e := startFake(t, routes)
	// The test's own process stands for the container's: it outlives the exec.
	w, err := watchPid(os.Getpid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return &sandbox{e: e, id: "sb", cid: "cid", user: "65534:65534", timeout: time.Minute, gvisor: true, pid: os.Getpid(), proc: w}, &made
}

// An exec the runtime did not start ran nothing: it is tried once more,
// and what the first attempt's error said never reaches the caller.
func TestExecNotStartedIsRetriedOnce(t *testing.T) {
	sb, made := execFake(t, 1)
	var out bytes.Buffer
	x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Stdout: &out})
	if err != nil || x.Code != 0 || out.String() != "ok\n" {
		t.Fatalf("Exec: %+v, %v, stdout %q; want the second attempt's ok", x, err, out.String())
	}
	if n := made.Load(); n != 2 {
		t.Fatalf("%d execs made; want 2", n)
	}

	// Twice in a row: the second failure is the caller's, unavailable.
	sb, made = execFake(t, 2)
	out.Reset()
	_, err = sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Stdout: &out})
	if !errdefs.IsUnavailable(err) || !errors.Is(err, errNotStarted) || !strings.Contains(err.Error(), "OCI runtime exec failed") {
		t.Fatalf("Exec: %v; want unavailable, naming the runtime's error", err)
	}
	if n := made.Load(); n != 2 || out.Len() != 0 {
		t.Fatalf("%d execs made, stdout %q; want 2 and nothing", n, out.String())
	}
}

// With stdin the first attempt may have read some of it: no retry.
func TestExecNotStartedWithStdinIsNotRetried(t *testing.T) {
	sb, made := execFake(t, 1)
	_, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"cat"}, Stdin: strings.NewReader("once"), Stdout: &bytes.Buffer{}})
	if !errors.Is(err, errNotStarted) {
		t.Fatalf("Exec: %v; want the runtime's refusal", err)
	}
	if n := made.Load(); n != 1 {
		t.Fatalf("%d execs made; want 1", n)
	}
}
