// Package gvisor is a client of a gVisor sandbox's control server.
//
// runsc's sandbox process serves urpc at a unix stream socket in runsc's
// root: one JSON call per message, descriptors as SCM_RIGHTS on the
// call's first bytes, one JSON result back. `runsc exec`, `ps` and `kill`
// are clients of it; calling it from airlock saves starting runsc (about
// 25 ms) for every exec. The method names and argument shapes are those
// of the pinned gVisor (runsc/boot/controller.go,
// pkg/sentry/control/proc.go); Find probes them, so that a runsc that
// does not answer is found before it is relied on.
package gvisor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/proctree"
)

const (
	methodExecuteAsync = "containerManager.ExecuteAsync"
	methodWaitPID      = "containerManager.WaitPID"
	methodSignal       = "containerManager.Signal"
	methodProcesses    = "containerManager.Processes"

	// Signal delivery modes (boot.SignalDeliveryMode).
	deliverToProcess      = 0
	deliverToProcessGroup = 3

	// maxControlReply bounds what a call reads back; a process list of a
	// sandbox at its pids limit is far smaller.
	maxControlReply = 16 << 20
	// controlCallTimeout bounds every call but WaitPID.
	controlCallTimeout = 10 * time.Second
)

// Control reaches one container of a gVisor sandbox.
type Control struct {
	Socket string // the control socket's path
	CID    string // the container's runsc id
}

// capabilitySets is auth.TaskCapabilities. It is always sent, all zero:
// a nil one gives a process running as uid 0 every capability.
type capabilitySets struct {
	PermittedCaps, InheritableCaps, EffectiveCaps, BoundingCaps, AmbientCaps uint64
}

// execArgs is control.ExecArgs, as much of it as a client sets; the
// sandbox fills in the container's mounts, pid namespace, rlimits and
// seccomp filter itself.
type execArgs struct {
	Argv             []string        `json:"argv"`
	Envv             []string        `json:"envv"`
	WorkingDirectory string          `json:"wd"`
	KUID             uint32          `json:"KUID"`
	KGID             uint32          `json:"KGID"`
	ExtraKGIDs       []uint32        `json:"ExtraKGIDs"`
	NoNewPrivileges  bool            `json:"NoNewPrivileges"`
	Capabilities     *capabilitySets `json:"Capabilities"`
	StdioIsPty       bool            `json:"StdioIsPty"`
	SupportTTYs      bool            `json:"SupportTTYs"`
	GuestFDs         []int           `json:"GuestFDs"`
	ContainerID      string          `json:"ContainerID"`
}

// call makes one call on its own connection. files go with the call and
// are the program's from then on (the caller closes its copies).
func (c Control) call(ctx context.Context, method string, arg any, files []*os.File, result any) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	msg, err := json.Marshal(struct {
		Method string `json:"method"`
		Arg    any    `json:"arg"`
	}{method, arg})
	if err != nil {
		return fmt.Errorf("encoding %s: %v", method, err)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	// The descriptors ride on the first write only.
	for len(msg) > 0 {
		n, _, err := conn.WriteMsgUnix(msg, oob, nil)
		if err != nil {
			return fmt.Errorf("calling %s: %v", method, err)
		}
		msg, oob = msg[n:], nil
	}
	// The files must stay open until they have been sent.
	runtime.KeepAlive(files)

	// The reply carries no descriptors for these methods; any that come
	// are closed.
	first, cmsg := make([]byte, 1), make([]byte, unix.CmsgSpace(4*16))
	n, oobn, _, _, err := conn.ReadMsgUnix(first, cmsg)
	if oobn > 0 {
		closeRights(cmsg[:oobn])
	}
	if err != nil || n != 1 {
		return fmt.Errorf("reading the reply to %s: %v", method, cmp.Or(err, io.ErrUnexpectedEOF))
	}
	var reply struct {
		Success bool   `json:"success"`
		Err     string `json:"err"`
		Result  any    `json:"result"`
	}
	reply.Result = result
	dec := json.NewDecoder(io.MultiReader(bytes.NewReader(first), io.LimitReader(conn, maxControlReply)))
	if err := dec.Decode(&reply); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reading the reply to %s: %v", method, err)
	}
	if !reply.Success {
		return &RefusedError{Method: method, Msg: reply.Err}
	}
	return nil
}

// RefusedError is an error the sandbox answered a call with.
type RefusedError struct{ Method, Msg string }

func (e *RefusedError) Error() string { return e.Method + ": " + e.Msg }

// dial connects to the control socket. A path too long for sun_path is
// reached through its O_PATH descriptor, as runsc itself does.
func (c Control) dial() (*net.UnixConn, error) {
	path := c.Socket
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening the control socket: %w", err)
		}
		defer unix.Close(fd)
		path = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("connecting to the sandbox's control socket: %w", err)
	}
	return conn, nil
}

func closeRights(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, _ := unix.ParseUnixRights(&m)
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// Start starts p in the container with stdio as its descriptors 0, 1
// and 2, and returns its pid in the sandbox. p's capabilities must be
// empty (the caller checks): every set is sent empty.
func (c Control) Start(ctx context.Context, p *specs.Process, stdio [3]*os.File) (int32, error) {
	args := execArgs{
		Argv:             p.Args,
		Envv:             p.Env,
		WorkingDirectory: p.Cwd,
		KUID:             p.User.UID,
		KGID:             p.User.GID,
		ExtraKGIDs:       append([]uint32{}, p.User.AdditionalGids...),
		NoNewPrivileges:  p.NoNewPrivileges,
		Capabilities:     &capabilitySets{},
		SupportTTYs:      true,
		GuestFDs:         []int{0, 1, 2},
		ContainerID:      c.CID,
	}
	ctx, cancel := context.WithTimeout(ctx, controlCallTimeout)
	defer cancel()
	var pid int32
	if err := c.call(ctx, methodExecuteAsync, &args, stdio[:], &pid); err != nil {
		return 0, err
	}
	if pid <= 0 {
		return 0, fmt.Errorf("%s answered pid %d", methodExecuteAsync, pid)
	}
	return pid, nil
}

// Wait waits for a process Start started, and returns its exit code
// (128+signal when killed).
func (c Control) Wait(ctx context.Context, pid int32) (int, error) {
	var ws uint32
	arg := struct {
		PID int32
		CID string
	}{pid, c.CID}
	if err := c.call(ctx, methodWaitPID, &arg, nil, &ws); err != nil {
		return -1, err
	}
	st := syscall.WaitStatus(ws)
	if st.Signaled() {
		return 128 + int(st.Signal()), nil
	}
	return st.ExitStatus(), nil
}

// Kill sends SIGKILL to a process, or with group to a process group.
func (c Control) Kill(ctx context.Context, pid int, group bool) error {
	mode := deliverToProcess
	if group {
		mode = deliverToProcessGroup
	}
	arg := struct {
		CID   string
		Signo int32
		PID   int32
		Mode  int
	}{c.CID, int32(syscall.SIGKILL), int32(pid), mode}
	ctx, cancel := context.WithTimeout(ctx, controlCallTimeout)
	defer cancel()
	return c.call(ctx, methodSignal, &arg, nil, nil)
}

// Processes lists the container's processes (no sessions: Sid is -1).
func (c Control) Processes(ctx context.Context) ([]proctree.Proc, error) {
	var ps []struct {
		PID  int `json:"pid"`
		PPID int `json:"ppid"`
		PGID int `json:"pgid"`
	}
	ctx, cancel := context.WithTimeout(ctx, controlCallTimeout)
	defer cancel()
	cid := c.CID
	if err := c.call(ctx, methodProcesses, &cid, nil, &ps); err != nil {
		return nil, err
	}
	out := make([]proctree.Proc, 0, len(ps))
	for _, p := range ps {
		out = append(out, proctree.Proc{Pid: p.PID, Ppid: p.PPID, Sid: -1, Pgid: p.PGID})
	}
	return out, nil
}

// KillTree SIGKILLs pid's process group, then each process below pid or
// in its group, as listed before the first kill.
func (c Control) KillTree(ctx context.Context, pid int) error {
	ps, err := c.Processes(ctx)
	if err != nil {
		return err
	}
	// A process that ended meanwhile fails its kill; what is left, the
	// caller sees by waiting.
	c.Kill(ctx, pid, true)
	for _, p := range proctree.Of(ps, pid) {
		c.Kill(ctx, p, false)
	}
	return nil
}

// Find returns the control of container id in runsc root state, where
// runsc's state names its sandbox's socket, once a call on it has been
// answered.
func Find(ctx context.Context, state, id string) (Control, error) {
	b, err := os.ReadFile(filepath.Join(state, id+"_sandbox:"+id+".state"))
	if err != nil {
		return Control{}, err
	}
	var st struct {
		Sandbox struct {
			Control string `json:"controlSocketPath"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return Control{}, fmt.Errorf("reading runsc's state of %q: %v", id, err)
	}
	if !filepath.IsAbs(st.Sandbox.Control) {
		return Control{}, fmt.Errorf("runsc's state of %q names no control socket (%q)", id, st.Sandbox.Control)
	}
	c := Control{Socket: st.Sandbox.Control, CID: id}
	if _, err := c.Processes(ctx); err != nil {
		return Control{}, err
	}
	return c, nil
}
