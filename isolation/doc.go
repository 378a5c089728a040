// Package isolation defines airlock's sandbox policy and converts it, purely
// and deterministically, into what an engine needs: a Docker container
// configuration today, an OCI runtime spec later.
//
// Rules:
//   - A Policy's defaults are data (Default). Conversion starts from a literal
//     configuration and applies ordered mutators; nothing is read from the
//     host or the image.
//   - The policy can only be narrowed by the caller. Nothing in a Policy can
//     give the sandbox a network, a capability, a host mount or a writable
//     root; those fields do not exist.
//   - Validate refuses any value that would weaken a limit (a zero memory
//     limit, for example, means "unlimited" to Docker and is an error here).
//   - Conversions are golden-tested: any change to what reaches the engine
//     shows up in review.
package isolation
