// Package mcpserver is airlock as a Model Context Protocol tool server:
// run_code, and sandbox_create, sandbox_exec, sandbox_write_file,
// sandbox_read_file, sandbox_list and sandbox_destroy over live sandboxes.
// It is built on the official Go SDK (github.com/modelcontextprotocol/go-sdk)
// and serves over stdio (Server.ServeStdio, `airlock mcp`) or streamable
// HTTP (Server.HTTPHandler, mounted by `airlock serve` behind its token).
//
// The rules:
//   - It is a thin face over the runner, like cmd/airlock: it converts tool
//     arguments to a runner.Spec, runner.SandboxSpec or runner.ExecSpec,
//     validates what only it knows (the language, exactly one of content and
//     content_base64, the size an MCP message can carry), and calls the
//     runner. Limits, isolation, path rules and the download allowlist are
//     the runner's, unchanged; which engine runs the work is the caller's
//     (see Runners).
//   - Everything in a tool call is hostile input: it is checked before any
//     sandbox is touched, and refused with a tool error (IsError) whose
//     message says what to do. Arguments that do not fit a tool's schema
//     (a wrong type, an unknown field) are refused by the SDK, also as tool
//     errors.
//   - The program's own outcome (exit code, timeout, OOM, output limit) is a
//     result, never a tool error; an engine failure or a refusal is a tool
//     error.
//   - A sandbox made here gets the runner's TTL and idle timeout, enforced
//     by its supervisor, so a client that disappears leaks nothing.
//   - Sessions over streamable HTTP are capped (WithMaxSessions): past the
//     cap a new one is refused as over_limit (429, airlock's error shape)
//     before the SDK sees it, and open ones go on. The count is read from
//     the SDK's own list of sessions, never kept beside it, so a session
//     ended by DELETE or the SDK's idle timeout frees its slot.
package mcpserver
