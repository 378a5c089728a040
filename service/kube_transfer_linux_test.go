package service

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/kube/cluster/clustertest"
)

// floodingSandbox is a service with one cluster sandbox, id, whose every
// pod exec writes mib MiB to stderr and exits 1.
func floodingSandbox(t *testing.T, mib int) (*Service, string) {
	t.Helper()
	return execSandbox(t, func(ctx context.Context, c *websocket.Conn, _ []string) {
		frame := append([]byte{cluster.ChannelStderr}, strings.Repeat("E", 1<<20-1)...)
		for range mib {
			c.Write(ctx, websocket.MessageBinary, frame)
		}
		c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelError},
			`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"1"}]}}`...))
	})
}

// execSandbox is claimedSandbox whose pod execs are answered by exec, given
// the exec's command; its stdin is read and dropped, and the stream closed
// once exec returns.
func execSandbox(t *testing.T, exec func(ctx context.Context, c *websocket.Conn, argv []string)) (*Service, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/default/pods/p/exec", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{cluster.Protocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		go func() { // stdin, until the client is done with it
			for {
				if _, _, err := c.Read(ctx); err != nil {
					return
				}
			}
		}()
		exec(ctx, c, r.URL.Query()["command"])
		c.Close(websocket.StatusNormalClosure, "")
	})
	return claimedSandbox(t, mux)
}

// claimedSandbox is a service with one cluster sandbox, whose API server
// is mux: pod "p" in namespace "default".
func claimedSandbox(t *testing.T, mux http.Handler) (*Service, string) {
	t.Helper()
	cfg, kc := clustertest.Serve(t, mux)
	root := t.TempDir()
	id := "sb-0123456789abcdef0123"
	b, _ := json.Marshal(claim.Record{ID: id, State: claim.Ready, Engine: claim.Engine, Kubeconfig: kc, Context: "x", Server: cfg.Server,
		Namespace: "default", Claim: id, Pod: "p"})
	os.MkdirAll(filepath.Join(root, "claims"), 0o700)
	if err := os.WriteFile(filepath.Join(root, "claims", id+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return New(root, nil), id
}

// What a transfer's exec writes to stderr is the sandbox's, without end:
// its error keeps the first execStderrCap bytes of it.
func TestKubeTransferStderrCapped(t *testing.T) {
	const mib = 8
	s, id := floodingSandbox(t, mib)
	ctx := context.Background()
	for name, do := range map[string]func() error{
		"upload": func() error {
			_, err := s.uploadKube(ctx, id, "/home/user/f", strings.NewReader("hi"), 10)
			return err
		},
		"download": func() error {
			_, err := s.downloadKube(ctx, id, "/home/user/f", io.Discard, artifacts.FileOptions{MaxBytes: 1 << 20, Types: artifacts.SessionTypes, SourceText: true})
			return err
		},
		"mkdir": func() error { return s.kubeMkdir(ctx, id, "/home/user/d", true) },
		"listing": func() error {
			_, err := s.downloadTreeKube(ctx, id, "/home/user/d", nil, false, nil)
			return err
		},
	} {
		err := do()
		if err == nil || !strings.Contains(err.Error(), "exited 1") || len(err.Error()) > execStderrCap+512 {
			n := 0
			if err != nil {
				n = len(err.Error())
			}
			t.Errorf("%s: an error of %d bytes (the exec wrote %d MiB to stderr): %.200v", name, n, mib, err)
		}
	}
}
