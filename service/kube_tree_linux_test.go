package service

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
)

// A cluster sandbox's listing is the sandbox's word: a process in it can
// write records into the stdout of the sh that lists. One written ahead of
// the walk's own, .git/config before .git, is refused with its directory
// never judged, and nothing of it reaches the host without --dotfiles.
func TestDownloadTreeKubeListingInjected(t *testing.T) {
	files := map[string]string{
		"/home/user/out/.git/config": "[core]\n\tfsmonitor = \"touch /tmp/owned\"\n",
		"/home/user/out/report.txt":  "all fine\n",
		"/home/user/out/a/b.txt":     "b\n",
	}
	listing := "f/home/user/out/.git/config\x00" + // written in by the sandbox
		"d/home/user/out/a/deep\x00" + // a directory under one not yet listed
		"f/home/user/out/report.txt\x00d/home/user/out/.git\x00f/home/user/out/.git/config\x00d/home/user/out/a\x00f/home/user/out/a/b.txt\x00"
	s, id := execSandbox(t, func(ctx context.Context, c *websocket.Conn, argv []string) {
		out := ""
		switch argv[2] {
		case listScript:
			out = listing
		case downloadScript:
			out = files[argv[4]]
		}
		c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelStdout}, out...))
		c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelError}, `{"status":"Success"}`...))
	})
	dst := t.TempDir()
	d, err := artifacts.OpenDest(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := map[string]string{}
	_, err = s.DownloadTreeKube(context.Background(), id, "/home/user/out", runner.DestSink(d), false, func(tr runner.Transfer) {
		got[tr.Path] = string(tr.Decision) + " " + string(tr.Reason)
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"/home/user/out/.git/config": "refused invalid_path", // the first record of it; the walk's own goes with .git
		"/home/user/out/a/deep":      "refused invalid_path",
		"/home/user/out/.git":        "refused hidden_name",
		"/home/user/out/report.txt":  "accepted ",
		"/home/user/out/a/b.txt":     "accepted ",
	} {
		if got[p] != want {
			t.Errorf("%s: %q, want %q (records %v)", p, got[p], want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, ".git")); !os.IsNotExist(err) {
		t.Errorf("%s/.git reached the host without --dotfiles (%v)", dst, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a", "b.txt")); err != nil || string(b) != "b\n" {
		t.Errorf("a/b.txt: %q %v", b, err)
	}
}

// slowReader hands out its bytes a little at a time, as a client's
// request body arrives.
type slowReader struct {
	b []byte
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	time.Sleep(2 * time.Millisecond)
	n := copy(p[:min(len(p), 512)], s.b)
	s.b = s.b[n:]
	return n, nil
}

// A tree upload whose first file the sandbox refuses without reading its
// stdin (the path is a directory there: uploadScript exits 65 at once)
// uploads the next files whole: the exec that was refused has stopped
// reading the tar stream when it returns, so nothing of the next entries
// is lost to it, nor read by it while the next entry is (run with -race).
func TestUploadTreeKubeAfterAnEarlyExit(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/default/pods/p/exec", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{cluster.Protocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		argv := r.URL.Query()["command"]
		ok := func() {
			c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelError}, `{"status":"Success"}`...))
			c.Close(websocket.StatusNormalClosure, "")
		}
		switch {
		case argv[2] == uploadScript && strings.HasSuffix(argv[4], "/a"):
			// A directory there: exit 65 before reading stdin.
			c.Write(ctx, websocket.MessageBinary, append([]byte{cluster.ChannelError},
				`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"65"}]}}`...))
			c.Close(websocket.StatusNormalClosure, "")
		case argv[2] == uploadScript:
			var in bytes.Buffer
			for {
				_, msg, err := c.Read(ctx)
				if err != nil {
					return
				}
				if msg[0] == cluster.ChannelClose {
					break
				}
				in.Write(msg[1:])
			}
			mu.Lock()
			got[argv[4]] = in.String()
			mu.Unlock()
			ok()
		default:
			ok()
		}
	})
	s, id := claimedSandbox(t, mux)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	big := bytes.Repeat([]byte("A"), 256<<10)
	want := map[string]string{}
	tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(big))})
	tw.Write(big)
	for _, n := range []string{"b", "c", "d"} {
		body := strings.Repeat(n, 10000)
		want["/home/user/t/"+n] = body
		tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		tw.Write([]byte(body))
	}
	tw.Close()
	var recs []runner.Transfer
	sum, err := s.UploadTreeKube(context.Background(), id, "/home/user/t", &slowReader{b: tb.Bytes()}, func(tr runner.Transfer) { recs = append(recs, tr) })
	mu.Lock()
	defer mu.Unlock()
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s reached the sandbox as %d bytes %.20q…, want %d bytes (sum %+v, err %v)", p, len(got[p]), got[p], len(w), sum, err)
		}
	}
	for _, r := range recs {
		if r.Path != "/home/user/t/a" && r.Decision == runner.DecisionAccepted && r.Size != 10000 {
			t.Errorf("record %s accepted with size %d, sha %s: not the client's file", r.Path, r.Size, r.SHA256)
		}
	}
}
