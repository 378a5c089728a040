package docker

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// A root given through a symlink, relative or with a trailing slash is the
// root the runner and the CLI name resolved (runner.ResolveRoot): the
// engine labels its containers with that name and reaps the containers
// labelled with it, so the airlocks on one root, however each spells it,
// see each other's runs.
func TestRootLabelIsTheResolvedRoot(t *testing.T) {
	base := roottest.LinkedDir(t)
	real := filepath.Join(base, "real")
	const id = "sb-0011223344556677"
	for _, root := range []string{"link", "link/", filepath.Join(base, "link"), "./real", real} {
		t.Run(root, func(t *testing.T) {
			labelled := []map[string]any{{
				"Id":     "c0c0c0",
				"Names":  []string{"/airlock-" + id},
				"Labels": map[string]string{LabelID: id, LabelRoot: real},
				"Mounts": []any{},
			}}
			f, e := startFake(t, map[string]http.HandlerFunc{
				"GET /info":            jsonReply(goodInfo),
				"GET /containers/json": labelFilter(t, labelled),
				"GET /volumes":         jsonReply(map[string]any{"Volumes": []any{}}),
				"DELETE /containers/c0c0c0": func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusNoContent)
				},
			})
			WithRoot(root)(e)
			if got := e.labels(&engine.SandboxSpec{ID: id})[LabelRoot]; got != real {
				t.Errorf("WithRoot(%q) labels containers %s=%q; want %q (runner.ResolveRoot)", root, LabelRoot, got, real)
			}
			e.Reap(context.Background(), id)
			if !f.called("DELETE /containers/c0c0c0") {
				t.Errorf("WithRoot(%q): Reap left the container labelled %s=%q, its own root's", root, LabelRoot, real)
			}
		})
	}
}
