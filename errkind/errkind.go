// Package errkind is airlock's one error table. Every face (the CLI, the
// HTTP API, MCP, batch lines and /run_code) classifies an error by Of and
// reports the kind's row: the CLI exits with Exit, the API answers with
// Status and the kind's word, MCP appends Advice to the tool error, and a
// Result or batch line carries the word as error_kind.
//
// Errors are classed by errdefs (github.com/containerd/errdefs) where they
// are made; this package only reads the class. A program's own ending
// (exit code, timeout, OOM, output limit) is not an error and never comes
// here: it is in the Result.
package errkind

import (
	"errors"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// Kind is an error's class on the wire: a Result's error_kind, the API's
// error.kind, a batch line's error_kind.
type Kind string

// The kinds, in the order Of tests them.
const (
	SandboxLost      Kind = "sandbox_lost"
	InvalidInput     Kind = "invalid_input"
	NotFound         Kind = "not_found"
	AlreadyExists    Kind = "already_exists"
	Unauthorized     Kind = "unauthorized"
	PermissionDenied Kind = "permission_denied"
	OverLimit        Kind = "over_limit"
	Conflict         Kind = "conflict"
	Timeout          Kind = "timeout"
	Canceled         Kind = "canceled"
	Unavailable      Kind = "unavailable"
	Internal         Kind = "internal"
)

// Row is one kind's line of the table.
type Row struct {
	Kind Kind
	// Exit is the CLI's exit code (sysexits where one fits).
	Exit int
	// Status is the HTTP status.
	Status int
	// Advice ends an MCP tool error: what a model should do next, in the
	// tools' terms.
	Advice string
	// When says when the kind is given, for the docs.
	When string
	// is reports whether err is of the kind.
	is func(error) bool
}

// Table is every kind, in the order Of tests them: the first row whose
// test holds is the error's kind, and Internal holds for anything.
var Table = []Row{
	{SandboxLost, 69, 503,
		"the sandbox ended from outside airlock and its work is gone; a retry is safe: sandbox_create makes a new one",
		"the sandbox ended from outside airlock (dockerd restarted, the runtime killed from the host); a retry is safe",
		func(err error) bool { return errors.Is(err, engine.ErrSandboxLost) }},
	{InvalidInput, 64, 400,
		"change the arguments as the message says and call again",
		"a malformed request, an unknown field, a bad size or duration, a limit past a ceiling or a template, a refused transfer",
		func(err error) bool {
			return errdefs.IsInvalidArgument(err) || errdefs.IsOutOfRange(err) || errdefs.IsNotImplemented(err)
		}},
	{NotFound, 66, 404,
		"check the name or id: sandbox_list lists the live sandboxes",
		"an image, template, sandbox, exec or file that is not there",
		errdefs.IsNotFound},
	{AlreadyExists, 64, 409,
		"pick another name, or remove the one that exists first",
		"a name already taken (a template, an image tag)",
		errdefs.IsAlreadyExists},
	{Unauthorized, 77, 401,
		"the request needs airlock's bearer token",
		"a TCP request without the bearer token, or with a wrong one",
		errdefs.IsUnauthorized},
	{PermissionDenied, 77, 403,
		"this needs more privilege than the caller has (the oci engine needs root)",
		"the caller may not do this (the oci engine needs root)",
		errdefs.IsPermissionDenied},
	{OverLimit, 75, 429,
		"too much is live: sandbox_destroy a sandbox you no longer need (sandbox_list lists them), or wait for run_code or sandbox_exec calls to end, then call again",
		"--max-sandboxes, --max-execs (or a sandbox's 64 execs), --max-exec-buffer or --max-mcp-sessions reached, a pool exhausted with --pool-exhausted fail, a body or message past its cap",
		errdefs.IsResourceExhausted},
	{Conflict, 75, 409,
		"something else holds it for now: try again in a moment",
		"in use for now: an image a sandbox uses, a run whose owner holds its lock, a sandbox mid-change",
		func(err error) bool {
			return errdefs.IsConflict(err) || errdefs.IsAborted(err) || errdefs.IsFailedPrecondition(err)
		}},
	{Timeout, 75, 504,
		"airlock gave up waiting; try again",
		"airlock gave up waiting (a lock, a create): not the program's own timeout, which is a Result",
		errdefs.IsDeadlineExceeded},
	{Canceled, 130, 499,
		"the call was canceled before it finished",
		"the caller went away or was interrupted before the work finished",
		errdefs.IsCanceled},
	{Unavailable, 69, 503,
		"airlock's engine is not usable now (`airlock doctor` says why); try again once it is fixed",
		"the engine or runtime is not usable now, an audit event cannot be written, the server is draining, downloads in progress hold --max-spool",
		errdefs.IsUnavailable},
	{Internal, 70, 500,
		"this is a bug in airlock; the message says where",
		"a bug",
		func(error) bool { return true }},
}

// ErrPoolEmpty is over_limit of one cause: a claim on a warm pool with no
// ready sandbox, under airlock serve --pool-exhausted fail. Freeing other
// sandboxes does not refill the pool, so Advice gives it advice of its
// own. Its message is errdefs.ErrResourceExhausted's.
var ErrPoolEmpty error = poolEmpty{}

type poolEmpty struct{}

func (poolEmpty) Error() string      { return "resource exhausted" }
func (poolEmpty) ResourceExhausted() {}

// Advice is what MCP appends to a tool error about err: its kind's Advice,
// or its cause's where the kind's would send a model the wrong way.
func Advice(err error) string {
	if errors.Is(err, ErrPoolEmpty) {
		return "the template's warm pool has no ready sandbox (each is used once, then refilled): wait a few seconds for the refill and call again; " +
			"if it stays empty, the pool is too small for the load (airlock serve --pool TEMPLATE=N)"
	}
	return RowOf(err).Advice
}

// Of is err's kind; nil has none ("").
func Of(err error) Kind {
	if err == nil {
		return ""
	}
	return RowOf(err).Kind
}

// RowOf is err's row of the table.
func RowOf(err error) Row {
	for _, r := range Table {
		if r.is(err) {
			return r
		}
	}
	return Table[len(Table)-1]
}

// Lookup returns kind's row.
func Lookup(k Kind) (Row, bool) {
	for _, r := range Table {
		if r.Kind == k {
			return r, true
		}
	}
	return Row{}, false
}
