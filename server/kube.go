package server

// Sandboxes on a Kubernetes cluster through the API: engine "kube" in a
// sandbox create claims one from the warm pool of its template on the
// cluster the server was started with (service.WithKube); exec, one-file
// transfers, inspect, list and delete reach it by id, as they reach the
// others. What a pod exec cannot carry is refused by the service.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// kubeFields are the only fields a sandbox create on a cluster takes:
// the cluster's SandboxTemplate is the policy.
var kubeFields = []string{"engine", "template", "labels"}

// checkKube refuses any field of q a cluster's sandbox does not take.
func (q *SandboxRequest) checkKube() error {
	b, _ := json.Marshal(q)
	var set map[string]json.RawMessage
	json.Unmarshal(b, &set)
	var extra []string
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if !slices.Contains(kubeFields, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		return invalid("engine kube takes only %s: the cluster's SandboxTemplate is the policy (render one with the policy wanted: airlock kube render); drop %s", strings.Join(kubeFields, ", "), strings.Join(extra, ", "))
	}
	return nil
}

// createKube claims the sandbox q asks for on the server's cluster.
func (s *Server) createKube(ctx context.Context, q *SandboxRequest) (int, []byte) {
	si, err := s.svc.CreateKubeFor(context.WithoutCancel(ctx), q.Template, q.Labels, 0)
	if err != nil {
		return encodeError(err)
	}
	return encode(http.StatusCreated, si.Public())
}

// execKube runs spec in sandbox id on its cluster, answered whole: a pod
// exec's output is not streamed here.
func (s *Server) execKube(w http.ResponseWriter, r *http.Request, id string, spec runner.ExecSpec) {
	if acceptsNDJSON(r) {
		writeError(w, fmt.Errorf("%w: sandbox %q runs on Kubernetes, whose execs answer whole here: ask for application/json (the SDKs: exec without output callbacks)", errdefs.ErrNotImplemented, id))
		return
	}
	res, err := s.svc.ExecKube(r.Context(), id, spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
