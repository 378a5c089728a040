// Package isolation defines airlock's sandbox policy and converts it, purely
// and deterministically, into what an engine needs: a Docker container
// configuration or an OCI runtime spec.
//
// Rules:
//   - A Policy's defaults are data (Default). Conversion starts from a literal
//     configuration and applies ordered mutators; nothing is read from the
//     host or the image.
//   - The policy can only be narrowed by the caller. Nothing in a Policy can
//     give the sandbox a capability, a host mount or a writable root; those
//     fields do not exist. Its one network is Egress, the hosts an egress
//     proxy may reach. DockerConfig refuses a policy with egress; OCISpec
//     takes one only with the network namespace airlock made for it
//     (OCINetwork), and refuses that namespace for a policy without, so no
//     sandbox gets a network it did not ask for, nor silently none.
//   - Validate refuses any value that would weaken a limit (a zero memory
//     limit, for example, means "unlimited" to Docker and is an error here).
//   - Conversions are golden-tested: any change to what reaches the engine
//     shows up in review.
//
// OCISpec builds the runtime spec that runsc and runc run from a bundle. Of
// the image it takes only Env and the working directory. CheckOCISpec runs
// last and refuses any spec wider than the policy: a capability, a joined
// namespace (but egress's network namespace) or a missing one, a hook, a writable root, a host mount other than
// airlock's binds, a writable bind without noexec, a writable tmpfs without
// its caps, nosuid and nodev, a seccomp filter other than the policy's, a
// working directory in /proc, /sys or /dev (CheckWorkdir), or a
// dev.gvisor.* annotation, which runsc reads as configuration.
// CheckDockerConfig does the same for the container configuration,
// reading its security options in order as dockerd does.
//
// No bind goes at a reserved target (ReservedTargets). The one exception
// is explicit and typed: a job's TmpSource, the host tmpfs airlock made to
// be a long-lived sandbox's /tmp, is bound at /tmp (nosuid,nodev) in place
// of the runtime's tmpfs; both final checks refuse any other /tmp.
package isolation
