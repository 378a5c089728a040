package service

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/runner"
)

// A cluster sandbox's transfer path is judged by the name rules of a
// local one (artifacts.CheckName on every component below /home/user or
// /tmp) before any pod exec runs: a control character, a backslash,
// bytes that are not UTF-8, a component over 255 bytes, airlock's
// reserved .airlock- prefix, or a path over 4096 bytes is invalid_path.
func TestKubeTransferRefusesBadNames(t *testing.T) {
	execs := 0
	s, id := execSandbox(t, func(ctx context.Context, c *websocket.Conn, _ []string) {
		execs++
		c.Write(ctx, websocket.MessageBinary, exitStatus(0))
	})
	ctx := context.Background()
	for _, p := range []string{
		"a\rb.txt",
		"/home/user/esc\x1b[2J.txt",
		"/tmp/tab\tdir/f.txt",
		"dir\x7f/f.txt",
		`back\slash.txt`,
		"bad\xffutf8.txt",
		strings.Repeat("n", 256) + "/f.txt",
		".airlock-up-1234",
		"/tmp/d/.airlock-tmp",
		strings.Repeat("d/", 2100) + "f.txt",
	} {
		if _, err := s.uploadKube(ctx, id, p, strings.NewReader("hi"), 10, true); runner.ReasonOf(err) != runner.ReasonInvalidPath {
			t.Errorf("upload to %.60q: %.100v; want invalid_path", p, err)
		}
		if _, err := s.DownloadKube(ctx, id, p, io.Discard); runner.ReasonOf(err) != runner.ReasonInvalidPath {
			t.Errorf("download of %.60q: %.100v; want invalid_path", p, err)
		}
		if _, err := s.KubeIsDir(ctx, id, p); runner.ReasonOf(err) != runner.ReasonInvalidPath {
			t.Errorf("is-dir of %.60q: %.100v; want invalid_path", p, err)
		}
	}
	if execs != 0 {
		t.Errorf("%d pod execs ran for refused paths; want none", execs)
	}
	// Plain names still pass.
	if _, err := s.uploadKube(ctx, id, "/tmp/ok dir/naïve.txt", strings.NewReader("hi"), 10, false); err != nil {
		t.Errorf("upload to a plain name: %v", err)
	}
}
