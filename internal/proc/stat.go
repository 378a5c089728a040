package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// State is a process's state, the third field of /proc/<pid>/stat.
type State byte

// The states Linux reports (proc_pid_stat(5)).
const (
	Running     State = 'R'
	Sleeping    State = 'S' // interruptible
	DiskSleep   State = 'D' // uninterruptible
	Zombie      State = 'Z' // exited, not yet reaped by its parent
	Stopped     State = 'T'
	TracingStop State = 't'
	Dead        State = 'X' // being torn down; 'x' on Linux 2.6.33 to 3.13
	Parked      State = 'P'
	Idle        State = 'I'
)

// Exited reports whether a process in state s has exited: a zombie, or
// dead. Its pid may still be taken (see the package's doc).
func (s State) Exited() bool {
	return s == Zombie || s == Dead || s == 'x'
}

// Stat is what airlock reads from /proc/<pid>/stat.
type Stat struct {
	Pid int
	// Comm is the command name, as the process set it: up to 15 bytes of
	// anything but NUL, spaces and parentheses included.
	Comm    string
	State   State
	Ppid    int
	Pgrp    int
	Session int
	// Flags are the kernel's flags of the process (PF_*).
	Flags uint64
	// Utime and Stime are the CPU time spent in user and kernel mode, in
	// clock ticks (USER_HZ, 100 a second on Linux).
	Utime, Stime uint64
	// StartTime is when the process started, in clock ticks since boot.
	StartTime uint64
}

// Alive reports whether the process has not exited: false for a zombie,
// whose pid is nonetheless still taken.
func (s Stat) Alive() bool { return !s.State.Exited() && s.Flags&pfExiting == 0 }

// pfExiting is the kernel's PF_EXITING: the process is in exit, and runs
// no more code of its own (an init killed with SIGKILL is so while the
// kernel kills the rest of its pid namespace, before it is a zombie).
const pfExiting = 0x4

// ReadStat reads and parses /proc/<pid>/stat. A process that is gone
// (reaped) gives an error matching fs.ErrNotExist.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(b)
	if err == nil && st.Pid != pid {
		err = fmt.Errorf("parsing /proc/%d/stat: it is pid %d's", pid, st.Pid)
	}
	return st, err
}

// ParseStat parses a /proc/<pid>/stat line. The command name is taken from
// the first '(' to the last ')', since it may hold both, and the fields
// after it never hold either.
func ParseStat(b []byte) (Stat, error) {
	bad := func(what string) (Stat, error) {
		return Stat{}, fmt.Errorf("parsing a /proc stat line %.80q: %s", b, what)
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open || b[open-1] != ' ' {
		return bad("no command name in parentheses after the pid")
	}
	var st Stat
	var err error
	if st.Pid, err = strconv.Atoi(string(b[:open-1])); err != nil || st.Pid <= 0 {
		return bad("the pid is not a positive number")
	}
	st.Comm = string(b[open+1 : end])
	// After the name: state, ppid, pgrp, session, tty_nr, tpgid, flags,
	// minflt, cminflt, majflt, cmajflt, utime, stime, cutime, cstime,
	// priority, nice, num_threads, itrealvalue, starttime, and more.
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 {
		return bad(fmt.Sprintf("%d fields after the command name; want at least 20", len(f)))
	}
	if len(f[0]) != 1 {
		return bad("the state is not one letter")
	}
	st.State = State(f[0][0])
	for _, v := range []struct {
		p   *int
		idx int
	}{{&st.Ppid, 1}, {&st.Pgrp, 2}, {&st.Session, 3}} {
		if *v.p, err = strconv.Atoi(string(f[v.idx])); err != nil {
			return bad(fmt.Sprintf("field %d is not a number", v.idx+3))
		}
	}
	for _, v := range []struct {
		p   *uint64
		idx int
	}{{&st.Flags, 6}, {&st.Utime, 11}, {&st.Stime, 12}, {&st.StartTime, 19}} {
		if *v.p, err = strconv.ParseUint(string(f[v.idx]), 10, 64); err != nil {
			return bad(fmt.Sprintf("field %d is not a number", v.idx+3))
		}
	}
	return st, nil
}
