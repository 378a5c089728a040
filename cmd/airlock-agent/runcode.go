package main

// The run-code client (see package internal/forkserver). The agent hands
// a run-code exec's job to the fork server itself (spawnRunCode), so that
// no client process starts, and says so when it could not; `airlock-agent
// run-code` is the client where no agent runs (by hand, or `runsc exec`),
// whose failure the host cannot tell from the job's own exit.

import (
	"fmt"
	"io"
	"os"

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

// failRunCode says why on stderr, for a person, and returns
// forkserver.ExitFailed.
func failRunCode(stderr io.Writer, why string) int {
	fmt.Fprintf(stderr, "%s%s\n", forkserver.FailurePrefix, why)
	return forkserver.ExitFailed
}

// runCodeJob is the job of a run-code client's exec
// (forkserver.ClientArgv): its file and arguments, directory and
// environment, as the client would send them.
func runCodeJob(s *agent.SpawnArgs) (forkserver.Job, bool) {
	if !agent.RunCode(s.Argv) {
		return forkserver.Job{}, false
	}
	dir := s.Dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			dir = "/"
		}
	}
	return forkserver.Job{Argv: s.Argv[3:], Dir: dir, Env: s.Env}, true
}

// spawnRunCode serves exec id, a run-code client's exec, itself: it
// hands job to the fork server at addr with the exec's pipes, and the
// exec's pid is the job's, which the host waits for through the sentry
// as it does any exec's (no client process starts). When the job cannot
// be handed over, or its pid does not come back, the answer is
// HandOverFailed and why, in place of Started: the host learns it from
// the agent, before the job could run, never from the job's output or
// exit status, which are the job's own.
func (a *server) spawnRunCode(addr string, id uint32, s *agent.SpawnArgs, job forkserver.Job) {
	x, pid, err := startRunCode(addr, s, job)
	if err != nil {
		why := err.Error()
		if len(why) > maxWhy {
			why = why[:maxWhy]
		}
		a.send(agent.HandOverFailed, id, []byte(why))
		return
	}
	a.started(id, x, pid)
}

// maxWhy bounds a HandOverFailed's reason.
const maxWhy = 1024

// startRunCode hands job to the fork server at addr with the exec's
// pipes, retrying a socket that refuses it for up to forkserver.DialWait
// (a server not listening yet), and returns the job's pid. On an error
// the exec's pipes are closed, and a job that may have started ended
// with its connection.
func startRunCode(addr string, s *agent.SpawnArgs, job forkserver.Job) (*execution, int, error) {
	x, child, err := pipes(s)
	if err != nil {
		return nil, 0, err
	}
	c, pid, err := forkserver.Start(addr, forkserver.DialWait, job, [3]int{int(child[0].Fd()), int(child[1].Fd()), int(child[2].Fd())})
	closeFiles(child[:])
	if err != nil {
		x.close()
		return nil, 0, err
	}
	x.job = c
	return x, pid, nil
}

// runRunCodePrime primes the sandbox's fork server (forkserver.Prime).
func runRunCodePrime() {
	if err := forkserver.Prime(forkserver.Socket, [3]*os.File{os.Stdin, os.Stdout, os.Stderr}); err != nil {
		os.Exit(failRunCode(os.Stderr, err.Error()))
	}
	os.Exit(0)
}
