package claim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
)

// CheckPodSpec refuses a pod spec (as JSON-shaped values) that widens
// what `airlock kube render` writes: a host namespace, a volume other
// than emptyDir, a mounted service-account token, no runtime class, a
// container that is privileged, may gain privileges, writes its root
// filesystem, runs as anyone but nobody, keeps or adds a capability or
// runs unconfined, or any container beside the one. The cluster is
// hostile: a template or pod can be edited after it was rendered, and a
// node that is not airlock's runs what the spec asks. The error is
// failed-precondition and names every field.
func CheckPodSpec(spec map[string]any) error {
	var bad []string
	refuse := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	for _, k := range []string{"hostNetwork", "hostPID", "hostIPC"} {
		if spec[k] == true {
			refuse("spec.%s is true", k)
		}
	}
	if spec["automountServiceAccountToken"] != false {
		refuse("spec.automountServiceAccountToken is not false")
	}
	if rc, _ := spec["runtimeClassName"].(string); rc == "" {
		refuse("spec.runtimeClassName is not set")
	}
	for _, k := range []string{"initContainers", "ephemeralContainers"} {
		if l, _ := spec[k].([]any); len(l) > 0 {
			refuse("spec.%s is set", k)
		}
	}
	vols, _ := spec["volumes"].([]any)
	for i, v := range vols {
		m, _ := v.(map[string]any)
		for k := range m {
			if k != "name" && k != "emptyDir" {
				refuse("spec.volumes[%d] is a %s volume, not emptyDir", i, k)
			}
		}
	}
	psc, _ := spec["securityContext"].(map[string]any)
	if l, _ := psc["sysctls"].([]any); len(l) > 0 {
		refuse("spec.securityContext.sysctls is set")
	}
	cs, _ := spec["containers"].([]any)
	if len(cs) != 1 {
		refuse("spec.containers has %d containers, not one", len(cs))
	}
	for i, c := range cs {
		ct, _ := c.(map[string]any)
		at := fmt.Sprintf("spec.containers[%d]", i)
		sc, _ := ct["securityContext"].(map[string]any)
		// What the container runs as: its own setting, else the pod's.
		eff := func(k string) any {
			if v, ok := sc[k]; ok {
				return v
			}
			return psc[k]
		}
		if sc["privileged"] == true {
			refuse("%s.securityContext.privileged is true", at)
		}
		if sc["allowPrivilegeEscalation"] != false {
			refuse("%s.securityContext.allowPrivilegeEscalation is not false", at)
		}
		if sc["readOnlyRootFilesystem"] != true {
			refuse("%s.securityContext.readOnlyRootFilesystem is not true", at)
		}
		if eff("runAsNonRoot") != true {
			refuse("%s runs without runAsNonRoot", at)
		}
		for _, k := range []string{"runAsUser", "runAsGroup"} {
			if n, ok := eff(k).(float64); !ok || n != isolation.Nobody {
				refuse("%s's %s is not %d", at, k, isolation.Nobody)
			}
		}
		caps, _ := sc["capabilities"].(map[string]any)
		if l, _ := caps["add"].([]any); len(l) > 0 {
			refuse("%s.securityContext.capabilities.add is set", at)
		}
		if drop, _ := caps["drop"].([]any); !slices.Contains(drop, any("ALL")) {
			refuse("%s.securityContext.capabilities.drop is not [ALL]", at)
		}
		if sp, _ := eff("seccompProfile").(map[string]any); sp["type"] == "Unconfined" {
			refuse("%s's seccompProfile is Unconfined", at)
		}
		if sc["procMount"] != nil && sc["procMount"] != "Default" {
			refuse("%s.securityContext.procMount is not Default", at)
		}
		if l, _ := ct["volumeDevices"].([]any); len(l) > 0 {
			refuse("%s.volumeDevices is set", at)
		}
		ports, _ := ct["ports"].([]any)
		for j, p := range ports {
			if pm, _ := p.(map[string]any); pm["hostPort"] != nil && pm["hostPort"] != float64(0) {
				refuse("%s.ports[%d].hostPort is set", at, j)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%w: its pod spec widens what `airlock kube render` writes: %s", errdefs.ErrFailedPrecondition, strings.Join(bad, "; "))
}

// maxDeadline bounds a pod's activeDeadlineSeconds as a duration: the
// API server's word, which may be past what a time.Duration holds.
const maxDeadline = time.Duration(math.MaxInt64 / 4)

// ActiveDeadline is activeDeadlineSeconds d as a duration, saturated at
// about 73 years so that sums with it do not overflow.
func ActiveDeadline(d int64) time.Duration {
	if d > int64(maxDeadline/time.Second) {
		return maxDeadline
	}
	return time.Duration(d) * time.Second
}
