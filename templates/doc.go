// Package templates keeps sandbox templates: an image, a policy and output
// settings defined once under a name, and reused by `airlock run`,
// `airlock sandbox create`, `airlock batch`, the API and the MCP tools.
//
// The rules:
//   - A template is pinned. Its image is a digest-pinned reference found in
//     airlock's image index (or the default image's lock) when the template
//     is created; a tag is refused. Its seccomp profile, when it has one of
//     its own, is copied under the store (content-addressed by sha256) and
//     checked against that hash on every read, so the template never
//     depends on a host path that can change.
//   - A template is complete. Every limit and output setting is stored with
//     its value at creation time, defaults included, so a later change of
//     airlock's defaults never changes a template.
//   - A template only narrows. Narrow applies a caller's explicit settings
//     on top of a template: an unset field comes from the template; a limit
//     or output size may be lowered and the artifact types reduced to a
//     subset, but nothing may be raised, and the image, isolation mode,
//     engine and seccomp profile may not be changed. A refusal wraps
//     errdefs.ErrInvalidArgument and names the field, both values and the
//     fix. Environment entries given explicitly are added on top of the
//     template's (a later entry for the same name wins); the working
//     directory, inputs, stdin and artifact delivery are the job's own.
//   - Version is the sha256 of the canonical JSON of everything that shapes
//     a sandbox (not the name, not the creation time): it changes whenever
//     the template does, and a warm pool keyed on it replaces its sandboxes.
//   - Storage: <root>/templates/<name>.json (0600) in a 0700 directory,
//     written through internal/atomicfile under one flock, with profile
//     copies under <root>/templates/seccomp/<sha256>.json (a copy no
//     template names any more is removed on the next Remove). Names match
//     ^[a-z0-9][a-z0-9._-]{0,62}$. Creating a name that exists is refused
//     (errdefs.ErrAlreadyExists) unless the caller replaces on purpose.
//     Removing a name that does not exist is errdefs.ErrNotFound: a
//     template is configuration, and a mistyped name should be caught.
//     A corrupt file (keys are read as written too: wire.CheckKeys) is an
//     error naming the file and the fix.
package templates
