// Package proc reads what airlock needs from Linux's /proc: a process's
// stat line (ReadStat, ParseStat), in one parser every caller shares, and
// the host's busy CPU time (HostCPU) for the benchmarks' costs.
//
// # Zombies
//
// A zombie (state Z, or X while the kernel tears it down) has exited; a
// process with PF_EXITING in its flags is exiting (an init killed with
// SIGKILL is so while the kernel kills the rest of its pid namespace,
// before it is a zombie). Either runs no more code of its own and writes
// nothing more, so it is not Alive: an owner in that state is gone, and
// what it owned may be reaped. But its pid is not free until its parent
// reaps it: /proc/<pid> stays, ReadStat succeeds, and no other process can
// be given the pid in the meantime. So a caller asks one of two questions:
//
//   - is the process still running (an owner, a sandbox's runtime)? ReadStat
//     without error and Stat.Alive: a zombie is not.
//   - does something still hold the pid (a process tree walked for a kill,
//     where a zombie's parent link still counts)? ReadStat without error,
//     whatever the state.
//
// A start time (Stat.StartTime) identifies a process across pid reuse:
// compare it with the one recorded, rather than the pid alone.
//
// The state is that of the process's main thread: a process whose main
// thread exited while other threads run also reads as a zombie. airlock's
// own processes and the runtimes it watches (Go programs) never do that.
package proc
