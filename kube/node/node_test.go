package node

import (
	"net/http/httptest"
	"testing"

	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"k8s.io/apiserver/pkg/authentication/user"
)

// TestExecIsCreate: whatever its method, a request that runs something in
// a pod is authorized as create; the rest keep the method's verb.
func TestExecIsCreate(t *testing.T) {
	a := execIsCreate{nodeutil.NoAuth()}
	for _, c := range []struct{ method, path, verb string }{
		{"GET", "/exec/ns/p/c?command=id&output=1", "create"},
		{"POST", "/exec/ns/p/c?command=id", "create"},
		{"GET", "/attach/ns/p/c", "create"},
		{"GET", "/run/ns/p/c", "create"},
		{"GET", "/portForward/ns/p", "create"},
		{"GET", "/containerLogs/ns/p/c", "get"},
		{"GET", "/executor", "get"},
		{"GET", "/pods", "get"},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		attrs := a.GetRequestAttributes(&user.DefaultInfo{Name: "metrics"}, r)
		if attrs.GetVerb() != c.verb || attrs.GetResource() != "nodes" || attrs.GetUser().GetName() != "metrics" {
			t.Errorf("%s %s: verb %q on %q for %q, want %q on nodes", c.method, c.path, attrs.GetVerb(), attrs.GetResource(), attrs.GetUser().GetName(), c.verb)
		}
	}
}
