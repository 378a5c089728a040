package docker

import (
	"net/http"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
)

func TestCheckImageConfig(t *testing.T) {
	const id = "sha256:0123"
	for _, tc := range []struct {
		name    string
		volumes map[string]struct{}
		labels  map[string]string
		workdir string
		want    []string // in the error; nil: accepted
	}{
		{"plain", nil, map[string]string{"org.opencontainers.image.title": "x"}, "/work", nil},
		{"volume", map[string]struct{}{"/vol": {}, "/data": {}}, nil, "", []string{"VOLUME /data /vol", "rebuild the image without VOLUME"}},
		{"airlock id label", nil, map[string]string{"airlock.id": "r1"}, "", []string{`"airlock.id"`, "rebuild"}},
		{"other airlock label", nil, map[string]string{"airlock.future": "x"}, "", []string{`"airlock.future"`}},
		// dockerd would start the program in an fd of runc's (CVE-2024-21626).
		{"workdir in /proc", nil, nil, "/proc/self/fd/7", []string{"sha256:0123", `WORKDIR "/proc/self/fd/7"`, "--workdir", "rebuild the image"}},
		{"workdir in /sys", nil, nil, "/sys/fs", []string{`WORKDIR "/sys/fs"`}},
		{"relative workdir", nil, nil, "work", []string{`WORKDIR "work"`}},
	} {
		err := checkImageConfig(id, tc.volumes, tc.labels, tc.workdir)
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

// Check refuses an image whose WORKDIR airlock refuses in a spec, where
// dockerd would use it: when the spec gives no workdir of its own.
func TestCheckImageWorkdir(t *testing.T) {
	j := fakeJob(t, isolation.GVisor)
	_, e := startFake(t, map[string]http.HandlerFunc{
		"GET /info": jsonReply(goodInfo),
		"GET /images/" + j.Image.String() + "/json": jsonReply(map[string]any{
			"Id": j.Image.String(), "Config": map[string]any{"WorkingDir": "/proc/self/fd/7"},
		}),
	})
	err := e.Check(t.Context(), j)
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `WORKDIR "/proc/self/fd/7"`) {
		t.Errorf("image WORKDIR /proc/self/fd/7, no workdir given: %v; want it refused as invalid, naming the WORKDIR", err)
	}
	j.Workdir = "/work"
	if err := e.Check(t.Context(), j); err != nil {
		t.Errorf("the same image, workdir /work given: %v", err)
	}
}
