package isolation

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// What makes one gVisor sandbox differ from another restored from the
// same snapshot, where programs look: its host name and its boot id.
// Everything else a checkpoint holds (memory, the sentry's kernel state)
// is the same in every clone.

// BootIDPath is where the kernel shows its boot id. gVisor's sentry makes
// one when it builds its /proc, and a checkpoint keeps it, so every
// sandbox restored from one snapshot would show the same. A gVisor
// sandbox of the oci engine shows instead a file airlock wrote for it
// alone (OCIJob.BootID), bound read-only over it.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// ociBootIDOptions are the options of the boot id's bind: read-only, not
// recursive, nothing executable or special.
var ociBootIDOptions = []string{"bind", "rprivate", "nosuid", "nodev", "noexec", "ro"}

// NewBootID returns a random version 4 UUID as Linux prints boot_id: 36
// lower-case characters and a newline.
func NewBootID() []byte { return []byte(uuid.NewString() + "\n") }

// RestoredHostname is the host name of sandbox id when it is restored
// from a snapshot taken under a policy naming host: host, '-' and 12 hex
// digits of a hash of id (the id itself is not shown to the sandbox).
// host is cut so that the whole stays within 63 characters. A booted
// sandbox is named host alone.
func RestoredHostname(host, id string) string {
	sum := sha256.Sum256([]byte("airlock-hostname\n" + id))
	suffix := "-" + hex.EncodeToString(sum[:6])
	return host[:min(len(host), 63-len(suffix))] + suffix
}

// withOCIHostname names the sandbox host in place of the policy's name;
// "" keeps the policy's.
func withOCIHostname(host string) OCIOpt {
	return func(s *specs.Spec) error {
		if host != "" {
			s.Hostname = host
		}
		return nil
	}
}

// withOCIBootID binds src, read-only, over the sandbox's boot id; "" binds
// nothing. It comes after /proc, which it covers a file of.
func withOCIBootID(src string) OCIOpt {
	return func(s *specs.Spec) error {
		if src != "" {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: BootIDPath, Type: "bind", Source: src, Options: slices.Clone(ociBootIDOptions)})
		}
		return nil
	}
}

// checkBootIDMount says what is wrong with m, a mount at BootIDPath, given
// the declared boot id file bootID ("" for none), or "".
func checkBootIDMount(m specs.Mount, bootID string) string {
	switch {
	case bootID == "":
		return "a mount over the boot id, and no boot id file is declared"
	case m.Type != "bind" || m.Source != bootID:
		return "the boot id is not the declared file " + strconv.Quote(bootID)
	case slices.Contains(m.Options, "rbind"):
		return "the boot id's bind is recursive"
	}
	for _, o := range ociBootIDOptions {
		if !slices.Contains(m.Options, o) {
			return "the boot id's bind lacks " + o
		}
	}
	for _, f := range [][2]string{{"nosuid", "suid"}, {"nodev", "dev"}, {"noexec", "exec"}, {"ro", "rw"}} {
		if !mountFlag(m.Options, f[0], f[1]) {
			return "the boot id's bind undoes " + f[0]
		}
	}
	return ""
}
