package main

// The spawner and its client (see internal/agent/spawner.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// runSpawner serves spawn requests until it is killed. Only the first
// spawner binds the socket; any other exits at once.
func runSpawner() {
	signal.Ignore(syscall.SIGPIPE)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: agent.SpawnerSocket, Net: "unix"})
	if err != nil {
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
			// The programs it started: reaped as they end.
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			continue
		}
		go serveSpawn(c)
	}
}

func serveSpawn(c *net.UnixConn) {
	defer c.Close()
	var req agent.SpawnRequest
	var rep agent.SpawnReply
	b, err := io.ReadAll(io.LimitReader(c, agent.MaxSpawnRequest+1))
	switch {
	case err != nil || len(b) > agent.MaxSpawnRequest:
		rep.Errno, rep.Error = int(syscall.E2BIG), "request too large or torn"
	case json.Unmarshal(b, &req) != nil || len(req.Argv) == 0:
		rep.Errno, rep.Error = int(syscall.EINVAL), "malformed request"
	default:
		rep.Pid, err = spawnDetached(&req)
		if err != nil {
			var en syscall.Errno
			if !errors.As(err, &en) {
				en = syscall.EINVAL
			}
			rep.Pid, rep.Errno, rep.Error = 0, int(en), err.Error()
		}
	}
	json.NewEncoder(c).Encode(rep)
}

// spawnDetached forks and execs req in a session of its own, its stdio on
// /dev/null, as a detached exec is.
func spawnDetached(req *agent.SpawnRequest) (int, error) {
	path, err := lookPath(req.Argv[0], req.Env, req.Dir)
	if err != nil {
		return 0, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	fd := null.Fd()
	return syscall.ForkExec(path, req.Argv, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: []uintptr{fd, fd, fd},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
}

// runSpawn asks the spawner to start argv with this process's environment
// and working directory, and exits as agent.SpawnRequest's codes say.
func runSpawn(argv []string) {
	os.Exit(spawn(agent.SpawnerSocket, argv, os.Stdout, os.Stderr))
}

// spawn asks the spawner at addr to start argv, says so on stdout or why
// not on stderr, and returns the exit code. Once the request has gone out
// whole, the spawner may have started the program: from then on, no
// answer is agent.SpawnUnanswered, never SpawnUnreachable, so that the
// host does not start it a second time.
func spawn(addr string, argv []string, stdout, stderr io.Writer) int {
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "airlock-agent spawn: no command given")
		return 126
	}
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return agent.SpawnUnreachable
	}
	defer c.Close()
	b, _ := json.Marshal(agent.SpawnRequest{Argv: argv, Env: os.Environ(), Dir: dir})
	if _, err := c.Write(b); err != nil {
		// A torn request is no JSON object: the spawner starts nothing.
		return agent.SpawnUnreachable
	}
	if err := c.CloseWrite(); err != nil {
		// The spawner still gets the whole request, at this
		// process's exit.
		fmt.Fprintf(stderr, "airlock: %q was handed to the spawner, which may start it: %v\n", argv[0], err)
		return agent.SpawnUnanswered
	}
	var rep agent.SpawnReply
	if err := json.NewDecoder(io.LimitReader(c, 4096)).Decode(&rep); err != nil {
		fmt.Fprintf(stderr, "airlock: the spawner read %q but did not answer: %v\n", argv[0], err)
		return agent.SpawnUnanswered
	}
	if rep.Pid > 0 {
		if _, err := fmt.Fprintf(stdout, "%s%d\n", agent.Spawned, rep.Pid); err != nil {
			return agent.SpawnUnanswered
		}
		return 0
	}
	fmt.Fprintf(stderr, "airlock: cannot start %q in the sandbox: %s\n", argv[0], rep.Error)
	if syscall.Errno(rep.Errno) == syscall.ENOENT {
		return 127
	}
	return 126
}
