package engine

import (
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// OOMKilled reads an OOM kill from the run's cgroup counters. The kernel
// counts one in its victim's cgroup and, on v2, in every group above it.
// countLost says the victim's group was one the runtime removes (runc's
// child, a docker container's) on v1: there a SIGKILL at the memory
// limit is taken for the OOM killer's.
// Elsewhere the count is the whole truth: a program that killed itself,
// or exited 137, at its limit was not OOM-killed.
func OOMKilled(st cgroup.Stats, code int, limit int64, countLost bool) bool {
	if st.OOMKills > 0 {
		return true
	}
	return countLost && code == 128+int(syscall.SIGKILL) && (st.MemoryLimitHits > 0 || st.MemoryPeak >= limit)
}
