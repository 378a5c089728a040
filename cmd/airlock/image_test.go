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

// A --max-layer-size or --max-image-size that is not a positive size is a
// usage error, found before the archive is opened.
func TestImportMaxSizeFlags(t *testing.T) {
	g := &globals{root: t.TempDir()}
	for _, f := range []importFlags{{maxLayer: "0"}, {maxImage: "-1GiB"}, {maxLayer: "lots"}} {
		if _, err := importImage(t.Context(), g, &f, "/nonexistent", nil, nil); exitCode(err) != exitUsage {
			t.Errorf("--max-layer-size %q --max-image-size %q: %v, want a usage error", f.maxLayer, f.maxImage, err)
		}
	}
}
