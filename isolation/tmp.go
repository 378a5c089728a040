package isolation

import (
	"fmt"
	"strconv"
)

// TmpDir is the sandbox's /tmp. By default it is the runtime's own tmpfs,
// capped by Limits.Tmp. A long-lived sandbox's /tmp is instead a host
// directory airlock made for it (a tmpfs with the same cap, mounted
// nosuid,nodev), declared as the job's TmpSource, so that files move in and
// out of it on the host side. TmpSource is the only host path that may
// appear at /tmp or any other reserved target: a Bind cannot.
const TmpDir = "/tmp"

// TmpInodesPerMiB caps the inodes of every tmpfs the program may write
// (/tmp, /dev/shm) by its size, as the runner caps a long-lived sandbox's
// /tmp: empty files take no blocks, so without nr_inodes a tmpfs of a few
// MiB would take the kernel's default of one inode per two pages of host
// memory (millions), bounded only by --memory. runsc ignores nr_inodes:
// under gVisor the inodes are the sentry's, in the sandbox's memory.
const TmpInodesPerMiB = 64

// tmpInodes is the inode cap of a tmpfs of size bytes.
func tmpInodes(size int64) string {
	return "nr_inodes=" + strconv.FormatInt(max(size>>20, 1)*TmpInodesPerMiB, 10)
}

// checkTmpSource refuses a declared /tmp source that is not an absolute,
// clean host path other than /, or that is also a bind's source.
func checkTmpSource(src string, binds []Bind) error {
	if src == "" {
		return nil
	}
	if !absClean(src) || src == "/" {
		return fmt.Errorf("%w: /tmp source %q must be an absolute, clean path other than /", ErrInvalid, src)
	}
	for _, b := range binds {
		if b.Source == src {
			return fmt.Errorf("%w: /tmp source %q is also bound at %q", ErrInvalid, src, b.Target)
		}
	}
	return nil
}

// checkBindAt says what is wrong with a host bind of source at target in a
// rendered configuration, or "": /tmp takes only the declared tmpSource, and
// no other reserved target takes any bind.
func checkBindAt(source, target, tmpSource string) string {
	if target == TmpDir && tmpSource != "" {
		if source != tmpSource {
			return "binds " + strconv.Quote(source) + " at /tmp, which is not the declared /tmp source " + strconv.Quote(tmpSource)
		}
		return ""
	}
	if err := CheckTarget(target); err != nil {
		return "binds " + strconv.Quote(source) + " at a reserved target: " + err.Error()
	}
	return ""
}
