package main

import (
	"errors"

	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/runner"
)

// airlock's own exit codes. They are a contract: docs/exit-codes.md documents them.
// An error's code is its kind's, in errkind's table; these are the
// program's endings, and the codes the CLI names itself. When the program
// ran and exited by itself, airlock exits with the program's code
// instead; --json tells the two apart without doubt.
const (
	exitUsage       = 64  // invalid input: flags, sizes, references, a name already taken (EX_USAGE)
	exitNotFound    = 66  // an image or file that is not there (EX_NOINPUT)
	exitUnavailable = 69  // engine or runtime unavailable (EX_UNAVAILABLE)
	exitInternal    = 70  // an internal failure (EX_SOFTWARE)
	exitPidsLimit   = 122 // the program hit its process limit and did not exit cleanly
	exitOutputLimit = 123 // the program passed its output cap and was killed
	exitTimeout     = 124 // the program passed its wall-clock limit (as timeout(1))
	exitOOM         = 137 // the program passed its memory limit (128+SIGKILL)
	exitKilled      = 130 // airlock was interrupted, or `airlock kill` destroyed the run
)

// exitErr carries an exit code for an outcome that has already been
// reported, so main prints nothing more.
type exitErr struct{ code int }

func (e *exitErr) Error() string { return "exit" }

// commandStarted is set once a command's own code runs; an error before
// that is a command-line mistake.
var commandStarted bool

// usageError marks a flag or argument mistake found by the CLI itself.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitCode is err's exit code: a usage error's, or its kind's in
// errkind's table.
func exitCode(err error) int {
	var ec *exitErr
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.code
	case errors.As(err, &ue):
		return exitUsage
	}
	row := errkind.RowOf(err)
	if row.Kind == errkind.Internal && !commandStarted {
		// cobra failed to parse the command line before any command ran.
		return exitUsage
	}
	return row.Exit
}

// resultCode maps a finished run to airlock's exit code.
func resultCode(r runner.Result, err error) int {
	if err != nil {
		return exitCode(err)
	}
	switch r.Reason {
	case runner.ReasonExited:
		return r.ExitCode
	case runner.ReasonTimeout:
		return exitTimeout
	case runner.ReasonOOM:
		return exitOOM
	case runner.ReasonOutputLimit:
		return exitOutputLimit
	case runner.ReasonPidsLimit:
		return exitPidsLimit
	case runner.ReasonKilled, runner.ReasonDestroyed:
		return exitKilled
	}
	return exitInternal
}
