package oci

// A client of a gVisor sandbox's control server. runsc's sandbox process
// serves urpc at a unix stream socket in runsc's root: one JSON call per
// message, descriptors as SCM_RIGHTS on the call's first bytes, one JSON
// result back. `runsc exec`, `ps` and `kill` are clients of it; calling it
// from airlock saves starting runsc (about 25 ms) for every exec. The
// method names and argument shapes are those of the pinned gVisor
// (runsc/boot/controller.go, pkg/sentry/control/proc.go); a runsc that
// does not answer them is detected at Create, and its sandboxes keep
// using `runsc exec`.

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

// control reaches one container of a gVisor sandbox.
type control struct {
	socket string // the control socket's path
	cid    string // the container's runsc id
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
func (c control) call(ctx context.Context, method string, arg any, files []*os.File, result any) error {
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
		return &controlError{method: method, msg: reply.Err}
	}
	return nil
}

// controlError is an error the sandbox answered with.
type controlError struct{ method, msg string }

func (e *controlError) Error() string { return e.method + ": " + e.msg }

// dial connects to the control socket. A path too long for sun_path is
// reached through its O_PATH descriptor, as runsc itself does.
func (c control) dial() (*net.UnixConn, error) {
	path := c.socket
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

// start starts p in the container with stdio as its descriptors 0, 1
// and 2, and returns its pid in the sandbox. p's capabilities must be
// empty (the caller checks).
func (c control) start(ctx context.Context, p *specs.Process, stdio [3]*os.File) (int32, error) {
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
		ContainerID:      c.cid,
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

// wait waits for a process start started, and returns its exit code
// (128+signal when killed).
func (c control) wait(ctx context.Context, pid int32) (int, error) {
	var ws uint32
	arg := struct {
		PID int32
		CID string
	}{pid, c.cid}
	if err := c.call(ctx, methodWaitPID, &arg, nil, &ws); err != nil {
		return -1, err
	}
	st := syscall.WaitStatus(ws)
	if st.Signaled() {
		return 128 + int(st.Signal()), nil
	}
	return st.ExitStatus(), nil
}

// kill sends SIGKILL to a process, or with group to a process group.
func (c control) kill(ctx context.Context, pid int, group bool) error {
	mode := deliverToProcess
	if group {
		mode = deliverToProcessGroup
	}
	arg := struct {
		CID   string
		Signo int32
		PID   int32
		Mode  int
	}{c.cid, int32(syscall.SIGKILL), int32(pid), mode}
	ctx, cancel := context.WithTimeout(ctx, controlCallTimeout)
	defer cancel()
	return c.call(ctx, methodSignal, &arg, nil, nil)
}

// processes lists the container's processes.
func (c control) processes(ctx context.Context) ([]proc, error) {
	var ps []struct {
		PID  int `json:"pid"`
		PPID int `json:"ppid"`
		PGID int `json:"pgid"`
	}
	ctx, cancel := context.WithTimeout(ctx, controlCallTimeout)
	defer cancel()
	cid := c.cid
	if err := c.call(ctx, methodProcesses, &cid, nil, &ps); err != nil {
		return nil, err
	}
	out := make([]proc, 0, len(ps))
	for _, p := range ps {
		out = append(out, proc{pid: p.PID, ppid: p.PPID, sid: -1, pgid: p.PGID})
	}
	return out, nil
}

// probeControl returns the control socket of gVisor sandbox name, read
// from runsc's state, once a call on it has been answered; "" (and the
// runtime's exec) when it is not found or does not answer.
func (e *Engine) probeControl(ctx context.Context, state, name string) string {
	b, err := os.ReadFile(filepath.Join(state, name+"_sandbox:"+name+".state"))
	var st struct {
		Sandbox struct {
			Control string `json:"controlSocketPath"`
		} `json:"sandbox"`
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err == nil && !filepath.IsAbs(st.Sandbox.Control) {
		err = fmt.Errorf("control socket %q", st.Sandbox.Control)
	}
	if err == nil {
		c := control{socket: st.Sandbox.Control, cid: name}
		_, err = c.processes(ctx)
	}
	if err != nil {
		e.log.Debug("gVisor control socket unusable; execs use runsc exec", "sandbox", name, "err", err)
		return ""
	}
	return st.Sandbox.Control
}
