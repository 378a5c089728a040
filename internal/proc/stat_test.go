package proc_test

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/internal/proc/proctest"
)

// tail is a real stat line's fields after the state and the session, up to
// and past starttime (22nd field: 4242).
const tail = " 0 -1 4194560 120 0 0 0 7 3 0 0 20 0 1 0 4242 1000 10 18446744073709551615"

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		name, line string
		want       proc.Stat
	}{
		{"plain", "17 (sleep) S 1 17 17" + tail + "\n", proc.Stat{Pid: 17, Comm: "sleep", State: 'S', Ppid: 1, Pgrp: 17, Session: 17, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
		{"spaces in the name", "5 (a b  c) R 4 3 2" + tail, proc.Stat{Pid: 5, Comm: "a b  c", State: 'R', Ppid: 4, Pgrp: 3, Session: 2, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
		{"a forged tail in the name", "5 (x) Z 9 9 9 ) S 1 2 3" + tail, proc.Stat{Pid: 5, Comm: "x) Z 9 9 9 ", State: 'S', Ppid: 1, Pgrp: 2, Session: 3, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
		{"parentheses in the name", "6 ((()) D 1 1 1" + tail, proc.Stat{Pid: 6, Comm: "(()", State: 'D', Ppid: 1, Pgrp: 1, Session: 1, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
		{"a newline in the name", "7 (a\nb) T 1 1 1" + tail, proc.Stat{Pid: 7, Comm: "a\nb", State: 'T', Ppid: 1, Pgrp: 1, Session: 1, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
		{"an empty name", "8 () I 2 0 0" + tail, proc.Stat{Pid: 8, Comm: "", State: 'I', Ppid: 2, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
		// State to session, and 16 more: starttime is the last.
		{"exactly twenty fields", "9 (x) S 1 1 1 " + strings.Join(strings.Fields(tail)[:16], " "), proc.Stat{Pid: 9, Comm: "x", State: 'S', Ppid: 1, Pgrp: 1, Session: 1, Flags: 4194560, Utime: 7, Stime: 3, StartTime: 4242}},
	} {
		got, err := proc.ParseStat([]byte(c.line))
		if err != nil || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// A process in exit (PF_EXITING) is not alive, whatever its state letter.
func TestExitingIsNotAlive(t *testing.T) {
	st, err := proc.ParseStat([]byte("9 (init) R 1 9 9 0 -1 4194564 120 0 0 0 7 3 0 0 20 0 1 0 4242"))
	if err != nil || st.Flags != 4194564 || st.Alive() {
		t.Fatalf("%+v, %v; want flags 4194564 and not alive", st, err)
	}
}

func TestParseStatRefusesMalformed(t *testing.T) {
	for name, line := range map[string]string{
		"empty":                  "",
		"no name":                "17 S 1 17 17" + tail,
		"no closing parenthesis": "17 (sleep S 1 17 17" + tail,
		"no pid":                 "(sleep) S 1 17 17" + tail,
		"pid not a number":       "x7 (sleep) S 1 17 17" + tail,
		"pid zero":               "0 (sleep) S 1 17 17" + tail,
		"no space before name":   "17(sleep) S 1 17 17" + tail,
		"short":                  "17 (sleep) S 1 17 17",
		"nineteen fields":        "17 (sleep) S 1 17 17 " + strings.Join(strings.Fields(tail)[:15], " "),
		"two-letter state":       "17 (sleep) SS 1 17 17" + tail,
		"ppid not a number":      "17 (sleep) S one 17 17" + tail,
		"starttime not a number": "17 (sleep) S 1 17 17" + strings.Replace(tail, "4242", "-1", 1),
		"utime negative":         "17 (sleep) S 1 17 17" + strings.Replace(tail, " 7 3 ", " -7 3 ", 1),
		"the name hides a tail":  "17 (sleep) S 1 17 17" + tail + " (x)",
	} {
		if st, err := proc.ParseStat([]byte(line)); err == nil {
			t.Errorf("%s: parsed as %+v", name, st)
		}
	}
}

func TestStateExited(t *testing.T) {
	for s, exited := range map[proc.State]bool{
		proc.Running: false, proc.Sleeping: false, proc.DiskSleep: false, proc.Stopped: false,
		proc.TracingStop: false, proc.Parked: false, proc.Idle: false, 'W': false, 'K': false,
		proc.Zombie: true, proc.Dead: true, 'x': true,
	} {
		if s.Exited() != exited || (proc.Stat{State: s}).Alive() == exited {
			t.Errorf("state %c: Exited %v, Alive %v; want exited %v", s, s.Exited(), proc.Stat{State: s}.Alive(), exited)
		}
	}
}

func TestReadStatSelf(t *testing.T) {
	st, err := proc.ReadStat(os.Getpid())
	if err != nil || st.Pid != os.Getpid() || st.Ppid != os.Getppid() || !st.Alive() || st.StartTime == 0 {
		t.Fatalf("self: %+v, %v", st, err)
	}
	if _, err := proc.ReadStat(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a pid that cannot exist: %v; want fs.ErrNotExist", err)
	}
}

// A real zombie: exited, so not alive, but its pid is still taken (its
// stat reads, with its parent and start time) until it is reaped.
func TestReadStatZombie(t *testing.T) {
	cmd, z := proctest.Zombie(t)
	if z.State != proc.Zombie || z.Alive() || z.Pid != cmd.Process.Pid || z.Ppid != os.Getpid() || z.StartTime == 0 {
		t.Fatalf("zombie: %+v", z)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if st, err := proc.ReadStat(z.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reaped: %+v, %v; want fs.ErrNotExist", st, err)
	}
}
