package docker

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestCheckImageConfig(t *testing.T) {
	const id = "sha256:0123"
	for _, tc := range []struct {
		name    string
		volumes map[string]struct{}
		labels  map[string]string
		want    []string // in the error; nil: accepted
	}{
		{"plain", nil, map[string]string{"org.opencontainers.image.title": "x"}, nil},
		{"volume", map[string]struct{}{"/vol": {}, "/data": {}}, nil, []string{"VOLUME /data /vol", "rebuild the image without VOLUME"}},
		{"airlock id label", nil, map[string]string{"airlock.id": "r1"}, []string{`"airlock.id"`, "rebuild"}},
		{"other airlock label", nil, map[string]string{"airlock.future": "x"}, []string{`"airlock.future"`}},
	} {
		err := checkImageConfig(id, tc.volumes, tc.labels)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: err = %v, want invalid argument", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}
