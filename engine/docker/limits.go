package docker

// What dockerd cannot enforce. On a host whose cgroups lack the memory,
// swap or pids controller, dockerd (moby's verifyPlatformContainerResources)
// drops that limit from the container and says so only in a warning. The
// engine refuses such a dockerd before it creates anything, by the facts of
// its info, and refuses any container dockerd created with a warning.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/system"
)

// limitFact is a fact of dockerd's info that a limit of
// isolation.DockerConfig's depends on.
type limitFact struct {
	// name is system.Info's field, as `docker info --format` takes it.
	name string
	has  func(system.Info) bool
	// limit is what dockerd would drop; needs is what its host lacks.
	limit, needs string
}

// limitFacts are every limit the container's configuration sets that
// dockerd applies only where the host can.
var limitFacts = []limitFact{
	{"MemoryLimit", func(i system.Info) bool { return i.MemoryLimit },
		"the memory limit", "the memory cgroup controller (boot with `cgroup_enable=memory`)"},
	{"SwapLimit", func(i system.Info) bool { return i.SwapLimit },
		"the memory+swap limit (swap without bound)", "swap accounting (boot with `swapaccount=1`)"},
	{"PidsLimit", func(i system.Info) bool { return i.PidsLimit },
		"the pids limit", "the pids cgroup controller (a kernel with CONFIG_CGROUP_PIDS)"},
	{"CPUCfsQuota", func(i system.Info) bool { return i.CPUCfsQuota },
		"the CPU limit", "CFS bandwidth control on the cpu cgroup controller (a kernel with CONFIG_CFS_BANDWIDTH)"},
}

// missingLimits names the limit facts dockerd's info says are false.
func missingLimits(info system.Info) []string {
	var missing []string
	for _, f := range limitFacts {
		if !f.has(info) {
			missing = append(missing, f.name)
		}
	}
	return missing
}

// limitsError is a dockerd that cannot apply every limit of airlock's
// policy. It is of errdefs' unavailable kind, and says how to fix it.
type limitsError struct {
	// Host is dockerd's address.
	Host string
	// Missing are the facts of dockerd's info that are false, by their
	// system.Info field names.
	Missing []string
}

func (e *limitsError) Error() string {
	return fmt.Sprintf("%v: dockerd at %s says false for %s in its info: it would drop %s from every container with only a warning, and airlock runs no sandbox without them; %s",
		errdefs.ErrUnavailable, e.Host, and(e.Missing), and(e.each(func(f limitFact) string { return f.limit })), e.Fix())
}

// Unwrap makes the error unavailable.
func (e *limitsError) Unwrap() error { return errdefs.ErrUnavailable }

// Fix says what to do.
func (e *limitsError) Fix() string {
	return fmt.Sprintf("give dockerd's host %s, then restart dockerd; or, when dockerd alone lacks them (a rootless dockerd, or one in a container), use `--engine oci`",
		and(e.each(func(f limitFact) string { return f.needs })))
}

// each is what of every missing fact.
func (e *limitsError) each(what func(limitFact) string) []string {
	var out []string
	for _, f := range limitFacts {
		if slices.Contains(e.Missing, f.name) {
			out = append(out, what(f))
		}
	}
	return out
}

// and joins "a, b and c".
func and(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// Bounds on the warnings an error quotes.
const (
	maxWarnings    = 8
	maxWarningSize = 512
)

// createWarnings refuses a container that dockerd created with warnings:
// dockerd says only there that it dropped a limit the host cannot apply,
// so a warning, whatever it says, means the container may not be what
// airlock asked for. The warnings are quoted, their control characters
// escaped. The caller removes the container.
func createWarnings(ws []string) error {
	if len(ws) == 0 {
		return nil
	}
	var q []string
	for i, w := range ws {
		if i == maxWarnings {
			q = append(q, fmt.Sprintf("and %d more", len(ws)-i))
			break
		}
		if len(w) > maxWarningSize {
			w = w[:maxWarningSize] + "…"
		}
		q = append(q, strconv.Quote(w))
	}
	return fmt.Errorf("creating sandbox: %w: dockerd created the container with warnings (%s), so it may not apply airlock's policy in full (dockerd drops a limit the host cannot apply and only warns); airlock removed it. `airlock doctor --engine docker` checks what dockerd lacks; or use `--engine oci`",
		errdefs.ErrUnavailable, strings.Join(q, ", "))
}
