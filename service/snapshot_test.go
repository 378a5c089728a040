package service

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// A fork server check that fails quotes the start of its stderr, not the
// whole of it (up to the template's output limit), and still says what
// failed.
func TestForkServerCheckFailedQuotesHead(t *testing.T) {
	stderr := append([]byte("forkserver: no spare\n"), bytes.Repeat([]byte("é"), 512<<10)...)
	res := runner.Result{Reason: runner.ReasonExited, ExitCode: 3, Stderr: runner.Stream{Head: stderr, Bytes: int64(len(stderr))}}
	err := forkServerCheckFailed(res)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("got %v; want ErrUnavailable", err)
	}
	msg := err.Error()
	if len(msg) > 1<<10 {
		t.Errorf("the error has %d bytes", len(msg))
	}
	for _, want := range []string{"no working fork server", "exit 3", `forkserver: no spare\n`, "1048597 bytes in all"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, `\x`) {
		t.Errorf("error %q cuts a character", msg)
	}
	if err := forkServerCheckFailed(runner.Result{Reason: runner.ReasonExited}); err != nil {
		t.Errorf("a passing check: %v", err)
	}
	short := runner.Result{Reason: runner.ReasonExited, ExitCode: 1, Stderr: runner.Stream{Head: []byte(" boom\n"), Bytes: 6}}
	if msg := forkServerCheckFailed(short).Error(); !strings.Contains(msg, `exit 1: "boom")`) {
		t.Errorf("a short stderr: %q", msg)
	}
}
