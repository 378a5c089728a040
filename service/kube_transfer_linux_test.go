package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/airlock-sandbox/airlock/runner"
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
			_, err := s.uploadKube(ctx, id, "/home/user/f", strings.NewReader("hi"), 10, false)
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

// dotSandbox is a cluster sandbox whose /home/user/.git holds a config
// that runs a command on the host's next `git status`.
func dotSandbox(t *testing.T) (*Service, string) {
	t.Helper()
	files := map[string]string{
		"/home/user/.git/config":  "[core]\n\tfsmonitor = \"touch /tmp/owned\"\n",
		"/home/user/.ssh/id_note": "a note\n",
	}
	return execSandbox(t, func(ctx context.Context, c *websocket.Conn, argv []string) {
		out := ""
		switch argv[2] {
		case listScript:
			out = "f/home/user/.git/config\x00"
		case downloadScript:
			out = files[argv[4]]
		}
		c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelStdout}, out...))
		c.Write(ctx, websocket.MessageBinary, exitStatus(0))
	})
}

// A download from a cluster sandbox refuses, without dotfiles, a path
// with any component starting with '.', as a local sandbox's does: one
// file, a tree's own directory, a file of many.
func TestKubeDownloadRefusesDotPaths(t *testing.T) {
	s, id := dotSandbox(t)
	ctx := context.Background()

	var buf bytes.Buffer
	tr, err := s.DownloadKube(ctx, id, "/home/user/.ssh/id_note", &buf)
	if runner.ReasonOf(err) != artifacts.ReasonHiddenName || buf.Len() > 0 {
		t.Errorf("one file under /home/user/.ssh: %s %q, %d bytes (%v); want refused hidden_name", tr.Decision, tr.Reason, buf.Len(), err)
	}
	if want := `download of "/home/user/.ssh/id_note" refused`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("the refusal says %q; want it to start %q", err, want)
	}

	dst := t.TempDir()
	d, err := artifacts.OpenDest(filepath.Join(dst, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var recs []string
	_, err = s.DownloadTreeKube(ctx, id, "/home/user/.git", runner.DestSink(d), false, func(tr runner.Transfer) {
		recs = append(recs, fmt.Sprintf("%s %s %s", tr.Path, tr.Decision, tr.Reason))
	})
	if runner.ReasonOf(err) != artifacts.ReasonHiddenName {
		t.Errorf("the tree /home/user/.git: %v (records %v); want refused hidden_name", err, recs)
	}
	if b, err := os.ReadFile(filepath.Join(dst, ".git", "config")); err == nil {
		t.Errorf("a .git/config reached the host without dotfiles: %q", b)
	}
	// With dotfiles the tree is taken.
	if _, err := s.DownloadTreeKube(ctx, id, "/home/user/.git", runner.DestSink(d), true, nil); err != nil {
		t.Errorf("the tree /home/user/.git with dotfiles: %v", err)
	}

	d2, err := artifacts.OpenDest(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	var got []runner.Transfer
	if _, err := s.DownloadFilesKube(ctx, id, []string{"/home/user/.git/config"}, runner.DestSink(d2), func(tr runner.Transfer) { got = append(got, tr) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Reason != artifacts.ReasonHiddenName {
		t.Errorf("many files, /home/user/.git/config: records %+v; want one refused hidden_name", got)
	}
}

// failWriter fails every write, as a full disk does.
type failWriter struct{}

var errDiskFull = errors.New("no space left on device (the host's)")

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// A download whose host side fails says so: the error is the writer's,
// not the exec's cut pipe.
func TestKubeDownloadKeepsHostWriteError(t *testing.T) {
	s, id := execSandbox(t, func(ctx context.Context, c *websocket.Conn, argv []string) {
		for range 16 {
			if c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelStdout}, strings.Repeat("hello world\n", 20000)...)) != nil {
				return
			}
		}
		c.Write(ctx, websocket.MessageBinary, exitStatus(0))
	})
	if _, err := s.DownloadKube(context.Background(), id, "/home/user/f.txt", failWriter{}); !errors.Is(err, errDiskFull) {
		t.Errorf("a download into a failing host writer: %v; want the writer's error", err)
	}
}

// exitStatus is the status channel's word for a program that exited code.
func exitStatus(code int) []byte {
	if code == 0 {
		return append([]byte{cluster.ChannelError}, `{"status":"Success"}`...)
	}
	return append([]byte{cluster.ChannelError}, fmt.Sprintf(`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"%d"}]}}`, code)...)
}

// A one-file upload to a cluster sandbox takes a relative path as the
// workspace's and makes missing directories, as a local sandbox's does
// (and MCP's sandbox_write_file says).
func TestKubeUploadAsLocal(t *testing.T) {
	dirs := map[string]bool{"/home/user": true, "/tmp": true}
	var wrote []string
	s, id := execSandbox(t, func(ctx context.Context, c *websocket.Conn, argv []string) {
		code := 0
		switch p := argv[4]; argv[2] {
		case mkdirScript:
			if len(argv) > 5 {
				for d := p; d != "/"; d = filepath.Dir(d) {
					dirs[d] = true
				}
			} else if dirs[filepath.Dir(p)] {
				dirs[p] = true
			} else {
				code = cpNotFound
			}
		case uploadScript:
			if !dirs[filepath.Dir(p)] {
				code = cpNotFound
			} else {
				wrote = append(wrote, p)
			}
		}
		c.Write(ctx, websocket.MessageBinary, exitStatus(code))
	})
	f, _, done, err := s.OpenFiles(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, p := range []string{"notes.txt", "/home/user/new/dir/notes.txt", "a/b.txt"} {
		if tr, err := f.Upload(context.Background(), p, strings.NewReader("hi\n"), 4); err != nil || tr.Path != p {
			t.Errorf("upload to %q: %+v (%v); want it taken", p, tr, err)
		}
	}
	if want := "/home/user/notes.txt /home/user/new/dir/notes.txt /home/user/a/b.txt"; strings.Join(wrote, " ") != want {
		t.Errorf("wrote %v; want %s", wrote, want)
	}
	for _, p := range []string{"../etc/passwd", "a//b", ""} {
		if _, err := f.Upload(context.Background(), p, strings.NewReader("hi\n"), 4); runner.ReasonOf(err) != runner.ReasonInvalidPath {
			t.Errorf("upload to %q: %v; want invalid_path", p, err)
		}
	}
}
