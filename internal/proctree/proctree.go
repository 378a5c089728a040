// Package proctree finds the processes a kill must reach: a process, its
// descendants, and the members of its session or process group, from a
// snapshot of the process table.
package proctree

// Proc is one process of a snapshot. Sid and Pgid are -1 where unknown
// (gVisor's process list has no sessions).
type Proc struct{ Pid, Ppid, Sid, Pgid int }

// Of lists the processes in pid's session or process group, or below pid
// or below any of those, pid included; never pid 1. The snapshot is taken
// before anything is killed, so that no child is orphaned to init (and
// out of reach) by the kill of its parent first.
func Of(ps []Proc, pid int) []int {
	in := map[int]bool{pid: true}
	for grew := true; grew; {
		grew = false
		for _, p := range ps {
			if !in[p.Pid] && (in[p.Ppid] || p.Sid == pid || p.Pgid == pid) && p.Pid > 1 {
				in[p.Pid], grew = true, true
			}
		}
	}
	out := make([]int, 0, len(in))
	for p := range in {
		out = append(out, p)
	}
	return out
}
