package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
