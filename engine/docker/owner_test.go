package docker

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// labelFilter answers GET /containers/json as dockerd does: only the
// containers whose labels match every "label" filter of the request.
func labelFilter(t *testing.T, all []map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var f map[string]map[string]bool
		if q := r.URL.Query().Get("filters"); q != "" {
			if err := json.Unmarshal([]byte(q), &f); err != nil {
				t.Errorf("filters %q: %v", q, err)
			}
		}
		out := []map[string]any{}
		for _, c := range all {
			labels := c["Labels"].(map[string]string)
			ok := true
			for want := range f["label"] {
				k, v, hasV := strings.Cut(want, "=")
				got, present := labels[k]
				if !present || hasV && got != v {
					ok = false
				}
			}
			if ok {
				out = append(out, c)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	}
}

// Two airlock roots share one dockerd: one root's Reap of an id (`airlock
// sandbox rm ID` of an id it has no record of) leaves the other's
// container of that id.
func TestReapTakesOnlyItsOwnRoot(t *testing.T) {
	const id = "sb-0011223344556677"
	other := []map[string]any{{
		"Id":     "b0b0b0",
		"Names":  []string{"/airlock-" + id},
		"Labels": map[string]string{LabelID: id, LabelRoot: "/var/lib/airlock-other"},
		"Mounts": []any{},
	}}
	f, e := startFake(t, map[string]http.HandlerFunc{
		"GET /info":            jsonReply(goodInfo),
		"GET /containers/json": labelFilter(t, other),
		"GET /volumes":         jsonReply(map[string]any{"Volumes": []any{}}),
		"DELETE /containers/b0b0b0": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		},
	})
	WithRoot("/var/lib/airlock")(e)
	e.Reap(context.Background(), id)
	if f.called("DELETE /containers/b0b0b0") {
		t.Error("root /var/lib/airlock's Reap removed a container labelled airlock.root=/var/lib/airlock-other")
	}
}

// Open, likewise, finds only its own root's sandbox.
func TestOpenTakesOnlyItsOwnRoot(t *testing.T) {
	const id = "sb-0011223344556677"
	other := []map[string]any{{
		"Id":     "b0b0b0",
		"Names":  []string{"/airlock-" + id},
		"Labels": map[string]string{LabelID: id, LabelRoot: "/var/lib/airlock-other", LabelTimeout: "1m0s"},
	}}
	f, e := startFake(t, map[string]http.HandlerFunc{
		"GET /info":            jsonReply(goodInfo),
		"GET /containers/json": labelFilter(t, other),
		"GET /containers/b0b0b0/json": jsonReply(map[string]any{
			"Id":         "b0b0b0",
			"Config":     map[string]any{"User": "65534:65534", "Labels": other[0]["Labels"]},
			"HostConfig": map[string]any{"Runtime": "airlock-runsc"},
			"State":      map[string]any{"Running": false, "Status": "exited"},
		}),
	})
	WithRoot("/var/lib/airlock")(e)
	_, err := e.Open(context.Background(), id)
	if f.called("GET /containers/b0b0b0/json") {
		t.Errorf("root /var/lib/airlock's Open took the container of root /var/lib/airlock-other (err = %v); want not found", err)
	}
}

// Image LABELs merge into a container's labels: a container the user ran
// with plain `docker run -v userdata:/data IMAGE`, from an image carrying
// airlock's labels, is not airlock's, and neither it nor its named volume
// is reaped. Airlock's containers carry the name it gave them.
func TestReapSparesContainersItDidNotName(t *testing.T) {
	const id, ours = "00112233445566778899", "99887766554433221100" // runner.runID: 20 hex digits
	foreign := []map[string]any{{
		"Id":     "f00f00",
		"Names":  []string{"/userapp"},
		"Labels": map[string]string{LabelID: id, LabelRoot: "/var/lib/airlock"},
		"Mounts": []map[string]any{{"Type": "volume", "Name": "userdata", "Destination": "/data"}},
	}, {
		"Id":     "a1a1a1",
		"Names":  []string{"/airlock-" + ours},
		"Labels": map[string]string{LabelID: ours, LabelRoot: "/var/lib/airlock"},
		"Mounts": []map[string]any{{"Type": "volume", "Name": "userdata", "Destination": "/data"}},
	}}
	f, e := startFake(t, map[string]http.HandlerFunc{
		"GET /info":            jsonReply(goodInfo),
		"GET /containers/json": labelFilter(t, foreign),
		"GET /volumes":         jsonReply(map[string]any{"Volumes": []any{}}),
		"DELETE /containers/f00f00": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		},
		"DELETE /containers/a1a1a1": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		},
		"DELETE /volumes/userdata": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		},
	})
	WithRoot("/var/lib/airlock")(e)
	left, err := e.Leftovers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		e.Reap(context.Background(), l)
	}
	if f.called("DELETE /volumes/userdata") {
		t.Error("Reap force-removed the named volume \"userdata\" of a container airlock did not create (labels from its image)")
	}
	if !f.called("DELETE /containers/a1a1a1") {
		t.Error("Reap left airlock's own container")
	}
	if f.called("DELETE /containers/f00f00") {
		t.Error("Reap removed container /userapp, which airlock did not create: its airlock labels came from its image")
	}
}
