package mcpserver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/runner"
)

// A tool error's message is the runner's, which names the problem, then
// the error's kind and errkind's advice for it (errkind.Advice): what to
// do next in the tools' own terms.

func isNotFound(err error) bool { return err != nil && errdefs.IsNotFound(err) }

// toolError words an error of new work (run_code, sandbox_create). An
// error that begins with its kind's word (errdefs' "unavailable: …") is
// not made to say it twice.
func toolError(doing string, err error) error {
	row := errkind.RowOf(err)
	msg := strings.TrimPrefix(err.Error(), string(row.Kind)+": ")
	return worded{fmt.Sprintf("%s: %s: %s (%s)", doing, row.Kind, msg, errkind.Advice(err)), err}
}

// worded is err with a message of its own.
type worded struct {
	msg string
	err error
}

func (w worded) Error() string { return w.msg }
func (w worded) Unwrap() error { return w.err }

// invalidArgs marks an error in a tool's arguments as invalid input.
type invalidArgs struct{ error }

func (e invalidArgs) Unwrap() error { return e.error }

// InvalidParameter classifies the error for errdefs.
func (invalidArgs) InvalidParameter() {}

// sandboxError words an error about sandbox id.
func sandboxError(id string, err error) error {
	row := errkind.RowOf(err)
	switch row.Kind {
	case errkind.SandboxLost:
		return fmt.Errorf("sandbox %q is lost (%s): %w. Its work is gone: sandbox_destroy frees it, and sandbox_create makes a new one", id, row.Kind, err)
	case errkind.NotFound:
		return fmt.Errorf("sandbox %q is gone (%s: destroyed, expired after its idle timeout or TTL, or never made): sandbox_create makes a new one, sandbox_list lists the live ones", id, row.Kind)
	}
	return fmt.Errorf("sandbox %q: %s: %w (%s)", id, row.Kind, err, errkind.Advice(err))
}

// hints say what to do about a refused transfer, by its reason word.
var hints = map[artifacts.Reason]string{
	runner.ReasonInvalidPath:       "files move in and out of the workspace /home/user and /tmp (reads also /out): give a clean path there, with no '..' (a relative path is under /home/user)",
	runner.ReasonNotFound:          "check the path: sandbox_exec with `ls -la DIR` shows what is there",
	runner.ReasonSymlink:           "airlock never follows a symlink: name the file it points to",
	runner.ReasonIsDirectory:       "name a file, not a directory; sandbox_exec with `ls -la DIR` lists it",
	runner.ReasonTooLarge:          "the file is over the sandbox's cap: make it smaller",
	runner.ReasonNoSpace:           "the area is full: remove files with sandbox_exec, or create a sandbox with more room",
	artifacts.ReasonTypeNotAllowed: "the sandbox's download allowlist refuses this type: convert it to text (base64 it with sandbox_exec, say) or read another file",
	artifacts.ReasonTypeMismatch:   "the content does not match the file's name: rename it, or convert it to text with sandbox_exec",
	artifacts.ReasonNotRegular:     "only regular files move: not devices, FIFOs or sockets",
	artifacts.ReasonHardlink:       "a file with several hard links is refused: copy it with sandbox_exec (cp) and read the copy",
	artifacts.ReasonHiddenName:     "paths with a component starting with '.' are refused: copy the file to a plain name with sandbox_exec first",
}

// transferError words a transfer refusal with its reason word, or a
// sandbox error.
func transferError(id string, err error) error {
	var te *runner.TransferError
	if !errors.As(err, &te) {
		return sandboxError(id, err)
	}
	if h, ok := hints[te.Reason]; ok {
		return fmt.Errorf("%w; %s", err, h)
	}
	return err
}
