package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/containerd/errdefs"
)

// fakeExec is an API server's pod exec as the client meets it: the
// protocols it offers, and what it does with one exec.
func fakeExec(t *testing.T, protocols []string, serve func(ctx context.Context, c *websocket.Conn, r *http.Request)) *Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{pod}/exec", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"kind":"Status","status":"Failure","message":"Unauthorized","code":401}`, http.StatusUnauthorized)
			return
		}
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: protocols})
		if err != nil {
			return
		}
		defer c.CloseNow()
		serve(r.Context(), c, r)
	})
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{pod}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","status":"Failure","message":"pods %q not found","reason":"NotFound","code":404}`, r.PathValue("pod"))
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	tlsConf := srv.Client().Transport.(*http.Transport).TLSClientConfig
	return New(&Config{Server: srv.URL, TLS: tlsConf, Token: "tok"})
}

func send(ctx context.Context, c *websocket.Conn, ch byte, p string) {
	c.Write(ctx, websocket.MessageBinary, append([]byte{ch}, p...))
}

// cat answers one exec as `sh -c 'cat; echo err >&2; exit N'` would, after
// checking the query.
func cat(t *testing.T, status string) func(ctx context.Context, c *websocket.Conn, r *http.Request) {
	return func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		q := r.URL.Query()
		if got := q["command"]; strings.Join(got, " ") != "sh -c cat" || q.Get("container") != "sandbox" || q.Get("stdin") != "true" || q.Get("stdout") != "true" {
			t.Errorf("query %v", q)
		}
		var in bytes.Buffer
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				t.Errorf("reading stdin: %v", err)
				return
			}
			if msg[0] == ChannelClose && msg[1] == ChannelStdin {
				break
			}
			if msg[0] != ChannelStdin {
				t.Errorf("a message on channel %d", msg[0])
			}
			in.Write(msg[1:])
		}
		send(ctx, c, ChannelStdout, in.String())
		send(ctx, c, ChannelStderr, "err\n")
		send(ctx, c, ChannelError, status)
		c.Close(websocket.StatusNormalClosure, "")
	}
}

func TestExec(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		code         int
	}{
		{"success", `{"metadata":{},"status":"Success"}`, 0},
		{"exit 3", `{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exited: exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}`, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeExec(t, []string{Protocol}, cat(t, tc.status))
			var out, errw bytes.Buffer
			big := strings.Repeat("x", 100<<10) // several stdin messages
			code, err := c.Exec(context.Background(), Exec{Namespace: "default", Pod: "p", Container: "sandbox",
				Argv: []string{"sh", "-c", "cat"}, Stdin: strings.NewReader(big), Stdout: &out, Stderr: &errw})
			if err != nil || code != tc.code || out.String() != big || errw.String() != "err\n" {
				t.Errorf("code %d, err %v, stdout %d bytes, stderr %q", code, err, out.Len(), errw.String())
			}
		})
	}
}

func TestExecFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		protocols []string
		serve     func(ctx context.Context, c *websocket.Conn, r *http.Request)
		is        func(error) bool
		says      string
	}{
		{"an older protocol only", []string{"v4.channel.k8s.io"}, func(context.Context, *websocket.Conn, *http.Request) {}, errdefs.IsNotImplemented, "v5.channel.k8s.io"},
		{"no status", []string{Protocol}, func(ctx context.Context, c *websocket.Conn, _ *http.Request) {
			send(ctx, c, ChannelStdout, "x")
			c.Close(websocket.StatusNormalClosure, "")
		}, errdefs.IsUnavailable, "without the program's status"},
		{"a broken stream", []string{Protocol}, func(ctx context.Context, c *websocket.Conn, _ *http.Request) {
			send(ctx, c, ChannelStdout, "x")
		}, errdefs.IsUnavailable, "the program's"},
		{"the container is not there", []string{Protocol}, func(ctx context.Context, c *websocket.Conn, _ *http.Request) {
			b, _ := json.Marshal(Status{Status: "Failure", Message: `container "x" not found`, Code: 404})
			send(ctx, c, ChannelError, string(b))
			c.Close(websocket.StatusNormalClosure, "")
		}, errdefs.IsNotFound, `container "x" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeExec(t, tc.protocols, tc.serve)
			code, err := c.Exec(context.Background(), Exec{Namespace: "default", Pod: "p", Argv: []string{"true"}})
			if code != -1 || !tc.is(err) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("code %d, err %v", code, err)
			}
		})
	}
}

func TestExecUnauthorized(t *testing.T) {
	c := fakeExec(t, []string{Protocol}, nil)
	c.cfg.Token = "wrong"
	if _, err := c.Exec(context.Background(), Exec{Namespace: "default", Pod: "p", Argv: []string{"true"}}); !errdefs.IsUnauthorized(err) {
		t.Errorf("err = %v; want unauthenticated", err)
	}
}

func TestStatusErrors(t *testing.T) {
	c := fakeExec(t, nil, nil)
	_, err := c.Pod(context.Background(), "default", "gone")
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `pods "gone" not found`) {
		t.Errorf("err = %v", err)
	}
}

// heldReader's first Read blocks until release is closed; it records a
// Read in progress, and one begun or ended once returned is set.
type heldReader struct {
	entered, release chan struct{}
	once             sync.Once
	inRead, returned atomic.Bool
	late             atomic.Bool
}

func (h *heldReader) Read(p []byte) (int, error) {
	h.late.Store(h.late.Load() || h.returned.Load())
	h.inRead.Store(true)
	defer h.inRead.Store(false)
	h.once.Do(func() { close(h.entered) })
	<-h.release
	h.late.Store(h.late.Load() || h.returned.Load())
	p[0] = 'x'
	return 1, nil
}

// A program that ends without reading its stdin (a transfer script's
// refusal, exit 65) leaves a Read of the caller's stdin in progress:
// Exec returns only once it has returned, and starts none after, so the
// caller has its reader back (a tree upload reads its tar stream's next
// entry from it at once).
func TestExecReturnsOnceStdinIsLeft(t *testing.T) {
	r := &heldReader{entered: make(chan struct{}), release: make(chan struct{})}
	c := fakeExec(t, []string{Protocol}, func(ctx context.Context, conn *websocket.Conn, _ *http.Request) {
		select {
		case <-r.entered:
		case <-ctx.Done():
			return
		}
		send(ctx, conn, ChannelError, `{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"65"}]}}`)
		conn.Close(websocket.StatusNormalClosure, "")
	})
	type ended struct {
		code int
		err  error
	}
	done := make(chan ended, 1)
	go func() {
		code, err := c.Exec(context.Background(), Exec{Namespace: "default", Pod: "p", Argv: []string{"sh"}, Stdin: r})
		r.returned.Store(true)
		done <- ended{code, err}
	}()
	<-r.entered
	var e ended
	select {
	case e = <-done:
		t.Errorf("Exec returned (%d, %v) while a Read of its stdin was in progress", e.code, e.err)
		close(r.release)
	case <-time.After(200 * time.Millisecond):
		close(r.release)
		e = <-done
	}
	if e.err != nil || e.code != 65 {
		t.Errorf("code %d, err %v; want 65", e.code, e.err)
	}
	if r.late.Load() || r.inRead.Load() {
		t.Errorf("stdin was read after Exec returned")
	}
}
