// Package server is airlock's HTTP API: `airlock serve`. Its handlers are
// a thin face over the runner library: they decode a request into the
// runner's own types (Spec, SandboxSpec, ExecSpec), call it, and encode
// its Result or SandboxInfo unchanged. No policy lives here; the defaults,
// limits and checks are the runner's, as for the CLI.
//
// Rules:
//   - every request body is hostile input: bodies are capped, JSON is
//     decoded strictly (unknown fields refused), and host paths are never
//     accepted from a client;
//   - TCP requires a bearer token, compared in constant time; the unix
//     socket relies on its file permissions;
//   - every error has one shape, {"error":{"kind","message"}}, with the
//     kinds of kindOf and their HTTP statuses;
//   - sandboxes are not the server's: they live under their own
//     supervisors, so a server that stops or is killed loses nothing, and
//     a new one finds them in the runner's state.
//
// docs/api.md describes the API; openapi.json is its OpenAPI 3.1 form.
package server
