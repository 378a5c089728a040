package service

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
