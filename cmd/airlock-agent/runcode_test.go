package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
)

// TestRunCodeNoServer: with no fork server the client exits
// forkserver.ExitFailed with one line starting FailurePrefix, which is how
// the host tells it from the job's own status.
func TestRunCodeNoServer(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var stderr bytes.Buffer
	code := runCode(fmt.Sprintf("@airlock-run-code-none-%d", time.Now().UnixNano()), []string{"/x.py"}, [3]*os.File{null, null, null}, &stderr)
	if code != forkserver.ExitFailed || !strings.HasPrefix(stderr.String(), forkserver.FailurePrefix) || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("runCode with no server: exit %d, stderr %q", code, stderr.String())
	}
}
