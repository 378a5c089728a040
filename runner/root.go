package runner

import "github.com/airlock-sandbox/airlock/internal/realpath"

// ResolveRoot returns airlock's root directory dir as the kernel names it:
// absolute, with the symlinks of the part that exists resolved. A relative
// root would change meaning with the working directory, and the mount
// points under the root (a run's tmpfs, a sandbox's workspace) are found
// by comparing paths with /proc/self/mountinfo, which names them so. The
// part that does not exist yet is kept as given: airlock makes it, as
// plain directories. It returns dir cleaned when there is no working
// directory to make it absolute against.
func ResolveRoot(dir string) string { return realpath.Of(dir) }
