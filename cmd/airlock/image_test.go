package main

import (
	"strings"
	"testing"
)

// A malformed --require-digest is a usage error, found before the
// archive is opened.
func TestImportRequireDigestFlag(t *testing.T) {
	g := &globals{root: t.TempDir()}
	for _, bad := range []string{"sha256:abc", "team/x@sha256:" + strings.Repeat("a", 64), "md5:0"} {
		if _, err := importImage(t.Context(), g, &importFlags{requireDigest: bad}, "/nonexistent", nil, nil); exitCode(err) != exitUsage {
			t.Errorf("--require-digest %q: %v, want a usage error", bad, err)
		}
	}
}
