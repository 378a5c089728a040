package main

// The run-code client (see package internal/forkserver). The agent hands
// a run-code exec's job to the fork server itself (startRunCode), so that
// no client process starts; `airlock-agent run-code` is the client where
// no agent runs, and where the server did not answer the agent's dial.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
)

// runRunCode hands argv (a Python file and its arguments) to the sandbox's
// fork server with this process's stdio, environment and working
// directory, and exits with the job's status.
func runRunCode(argv []string) {
	os.Exit(runCode(forkserver.Socket, argv, [3]*os.File{os.Stdin, os.Stdout, os.Stderr}, os.Stderr))
}

// runCode returns the job's exit code, or forkserver.ExitFailed, saying
// why on stderr, when the job did not run or its status never came back.
func runCode(addr string, argv []string, stdio [3]*os.File, stderr io.Writer) int {
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	code, err := forkserver.Run(addr, forkserver.Job{Argv: argv, Dir: dir, Env: os.Environ()}, stdio)
	if err != nil {
		return failRunCode(stderr, err.Error())
	}
	return code
}

// failRunCode says why on stderr as the host expects it, and returns
// forkserver.ExitFailed.
func failRunCode(stderr io.Writer, why string) int {
	fmt.Fprintf(stderr, "%s%s\n", forkserver.FailurePrefix, why)
	return forkserver.ExitFailed
}

// runCodeJob is the job of a run-code client's exec
// (forkserver.ClientArgv): its file and arguments, directory and
// environment, as the client would send them.
func runCodeJob(s *agent.SpawnArgs) (forkserver.Job, bool) {
	a := s.Argv
	if len(a) < 4 || a[0] != agent.Path || a[1] != "run-code" || a[2] != "--" {
		return forkserver.Job{}, false
	}
	dir := s.Dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			dir = "/"
		}
	}
	return forkserver.Job{Argv: a[3:], Dir: dir, Env: s.Env}, true
}

// startExec starts s. A run-code client's job goes to the fork server
// from the agent, and the exec's pid is the job's own, which the host
// waits for through the sentry as it does any exec's: the client's start
// (a Go program's, inside gVisor) is saved. When no server answers the one
// dial, the client runs instead, and waits for one or says why not.
func startExec(s *agent.SpawnArgs) (*execution, int, error) {
	if job, ok := runCodeJob(s); ok {
		x, pid, err := startRunCode(forkserver.Socket, s, job)
		if !errors.Is(err, forkserver.ErrNoServer) {
			return x, pid, err
		}
	}
	return start(s)
}

// startRunCode hands job to the fork server at addr with the exec's pipes. Once
// the dial has succeeded, a failure is the client's: an exec that writes
// forkserver.FailurePrefix and why to its stderr and exits
// forkserver.ExitFailed, so that the host tells it from the job's status
// as it does the client's.
func startRunCode(addr string, s *agent.SpawnArgs, job forkserver.Job) (*execution, int, error) {
	x, child, err := pipes(s)
	if err != nil {
		return nil, 0, err
	}
	c, pid, err := forkserver.Start(addr, 0, job, [3]int{int(child[0].Fd()), int(child[1].Fd()), int(child[2].Fd())})
	closeFiles(child[:])
	if err != nil {
		x.close()
		if errors.Is(err, forkserver.ErrNoServer) {
			return nil, 0, err
		}
		fail := *s
		fail.Argv = []string{agent.Path, "run-code-failed", err.Error()}
		return start(&fail)
	}
	x.job = c
	return x, pid, nil
}

// runRunCodeFailed is startRunCode's failed exec.
func runRunCodeFailed(why []string) {
	os.Exit(failRunCode(os.Stderr, strings.Join(why, " ")))
}

// runRunCodePrime primes the sandbox's fork server (forkserver.Prime).
func runRunCodePrime() {
	if err := forkserver.Prime(forkserver.Socket, [3]*os.File{os.Stdin, os.Stdout, os.Stderr}); err != nil {
		os.Exit(failRunCode(os.Stderr, err.Error()))
	}
	os.Exit(0)
}
