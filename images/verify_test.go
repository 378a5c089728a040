package images

import (
	"archive/tar"
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/store"
)

func layerOf(t *testing.T, hs ...tar.Header) v1.Layer {
	t.Helper()
	l, err := imagetest.HeaderLayer(hs...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestVerifyRefusesUnsafeLayers(t *testing.T) {
	ok := layerOf(t, tar.Header{Typeflag: tar.TypeSymlink, Name: "etc", Linkname: "/etc"})
	for _, tc := range []struct {
		name   string
		layers []v1.Layer
		entry  string // "" for an image Verify accepts
	}{
		{"safe", []v1.Layer{ok}, ""},
		{"dotdot", []v1.Layer{layerOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Size: 1})}, `layer 1 (sha256:`},
		{"absolute", []v1.Layer{layerOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "/bin/sh"})}, `entry "/bin/sh"`},
		{"through a lower symlink", []v1.Layer{ok, layerOf(t, tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd"})}, `layer 2 (sha256:`},
		{"device kept out", []v1.Layer{layerOf(t, tar.Header{Typeflag: 'V', Name: "vol"})}, `entry "vol"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := mutate.AppendLayers(empty.Image, tc.layers...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Verify(t.Context(), &Source{Image: img}, Limits{}, nil)
			if tc.entry == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, store.ErrUnsafeLayer) || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("got %v, want ErrUnsafeLayer naming %s", err, tc.entry)
			}
			t.Log(err)
		})
	}
}
