package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// An error or progress line reaches stderr with what could drive a
// terminal escaped, whoever wrote it: an API server's message, a node's
// run id, a job's progress.
func TestSayfEscapes(t *testing.T) {
	hostile := "\x1b]0;pwned\x07\x1b[2J\x1b[1;1Hall 40 jobs passed\r\u202egnp.exe\x9b"
	for _, tc := range []struct {
		format string
		args   []any
	}{
		{"%v", []any{fmt.Errorf("reading pod: %w", errors.New(hostile))}},
		{"job %s: %s", []any{"j1", hostile}},
		{"%s", []any{"run " + hostile + " killed at its 10ms timeout (reason timeout)"}},
	} {
		var b bytes.Buffer
		sayf(&b, tc.format, tc.args...)
		got := b.String()
		if strings.ContainsAny(got, "\x1b\x07\r\u202e") || strings.Contains(got, "\x9b") || !strings.HasPrefix(got, "airlock: ") || !strings.HasSuffix(got, "\n") ||
			!strings.Contains(got, `\x1b]0;pwned\x07\x1b[2J`) {
			t.Errorf("sayf(%q) wrote %q", tc.format, got)
		}
	}
}
