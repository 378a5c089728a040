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
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "airlock-agent spawn: no command given")
		os.Exit(126)
	}
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: agent.SpawnerSocket, Net: "unix"})
	if err != nil {
		os.Exit(agent.SpawnUnreachable)
	}
	defer c.Close()
	b, _ := json.Marshal(agent.SpawnRequest{Argv: argv, Env: os.Environ(), Dir: dir})
	if _, err := c.Write(b); err != nil {
		os.Exit(agent.SpawnUnreachable)
	}
	c.CloseWrite()
	var rep agent.SpawnReply
	if err := json.NewDecoder(io.LimitReader(c, 4096)).Decode(&rep); err != nil {
		os.Exit(agent.SpawnUnreachable)
	}
	if rep.Pid > 0 {
		fmt.Printf("%s%d\n", agent.Spawned, rep.Pid)
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "airlock: cannot start %q in the sandbox: %s\n", argv[0], rep.Error)
	if syscall.Errno(rep.Errno) == syscall.ENOENT {
		os.Exit(127)
	}
	os.Exit(126)
}
