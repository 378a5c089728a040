// Package forkserver is the run-code fork server: the Python program a
// run-code template's snapshot holds (airlock template create NAME
// --run-code python), and the protocol of its client, `airlock-agent
// run-code`, which runs one job through it. The server's replies reach
// only the client, inside the sandbox; the host sees the client's exit
// status and output, as it sees any exec's.
package forkserver

import (
	_ "embed"
	"fmt"
	"regexp"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// Script is the fork server, run as `python3 -c Script MODULE...`.
//
//go:embed python.py
var Script string

// Socket is the server's abstract unix socket in the sandbox (Go's "@"
// prefix).
const Socket = "@airlock-run-code"

// Language is the one language with a fork server.
const Language = "python"

// Interpreter runs Script.
const Interpreter = "python3"

// MaxJob caps a job the server reads (argv, working directory and
// environment, as JSON); Script holds the same number.
const MaxJob = 1 << 20

// MaxReply caps the server's reply the client reads.
const MaxReply = 256

// Client exit codes of its own: ExitFailed when the job never reached
// the server or no status came back (the client then writes a line
// starting with FailurePrefix to stderr). Otherwise the client exits with
// the job's status: its exit code, or 128+N when signal N ended it.
const (
	ExitFailed    = 125
	FailurePrefix = "airlock-agent run-code: "
)

var moduleRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// Argv is the warm argv of a run-code template for language lang whose
// server imports modules before its snapshot. A language other than
// python, or a module name that is not a dotted Python identifier, is
// an error of invalid input, which the caller classifies (the package
// stays on the standard library, as the agent that imports it does).
func Argv(lang string, modules []string) ([]string, error) {
	if lang != Language {
		return nil, fmt.Errorf("--run-code %q: only python has a fork server; give --run-code python", lang)
	}
	argv := []string{Interpreter, "-c", Script}
	for _, m := range modules {
		if !moduleRE.MatchString(m) || len(m) > 256 {
			return nil, fmt.Errorf("--import %q is not a Python module name: give one such as numpy or os.path", m)
		}
		argv = append(argv, m)
	}
	return argv, nil
}

// ClientArgv is the exec that runs Python file with args as one job of
// the sandbox's fork server: `/.airlock-agent run-code -- FILE ARGS...`.
func ClientArgv(file string, args ...string) []string {
	return append([]string{agent.Path, "run-code", "--", file}, args...)
}

// PrimeArgv is the exec that primes a restored sandbox's fork server
// before any job (Prime): a pool runs it before it pools the sandbox.
func PrimeArgv() []string { return []string{agent.Path, "run-code-prime"} }

// Is reports whether warm, a template's warm argv, is this airlock's fork
// server: a template made by another airlock, whose server may speak
// another protocol, is not.
func Is(warm []string) bool {
	return len(warm) >= 3 && warm[0] == Interpreter && warm[1] == "-c" && warm[2] == Script
}

// Modules returns what the server of warm (Is) imports.
func Modules(warm []string) []string {
	if !Is(warm) {
		return nil
	}
	return warm[3:]
}
