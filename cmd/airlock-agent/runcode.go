package main

// The run-code client (see package internal/forkserver).

import (
	"fmt"
	"io"
	"os"

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
		fmt.Fprintf(stderr, "%s%v\n", forkserver.FailurePrefix, err)
		return forkserver.ExitFailed
	}
	return code
}
