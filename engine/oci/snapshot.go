package oci

// Snapshots (engine.Snapshotter): a warmed gVisor sandbox checkpointed
// into <root>/oci/snapshots/<name>, from which new sandboxes are restored
// instead of booted. This file holds the pure part: the manifest, its
// name, and the check that a snapshot fits the sandbox asked of it.

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/isolation"
)

// manifestFile, in a snapshot's directory, is its manifest; the
// directory's name is the sha256 of the file's bytes.
const manifestFile = "manifest.json"

// manifestVersion is the manifest's format.
const manifestVersion = 1

// snapshotManifest is what a snapshot was taken under, and its content.
type snapshotManifest struct {
	Version int `json:"version"`
	// Image is the image ID the sandbox ran.
	Image digest.Digest `json:"image"`
	// Policy is policyDigest of the sandbox's policy.
	Policy string `json:"policy_sha256"`
	// Runtime is runsc's version, as it prints it.
	Runtime string `json:"runtime"`
	// Agent says the exec agent was bound into the sandbox: a sandbox
	// restored from it has the same mounts. AgentVersion is the wire
	// format the host spoke to it (agent.Version): the snapshot holds the
	// agent process itself, which a host of another format refuses.
	Agent        bool   `json:"agent"`
	AgentVersion string `json:"agent_version,omitempty"`
	// BootID says the sandbox's boot id was a file of its own, bound over
	// the sentry's: a sandbox restored from it has that mount too, with
	// a boot id of its own.
	BootID bool `json:"boot_id"`
	// Files are the checkpoint's files by name, each with its sha256.
	Files     map[string]string `json:"files"`
	CreatedAt time.Time         `json:"created_at"`
}

// encode returns the manifest's bytes and the snapshot's name, their
// sha256 in hex. encoding/json sorts the files' keys, so one manifest
// has one name.
func (m *snapshotManifest) encode() ([]byte, string) {
	b, err := json.Marshal(m)
	if err != nil {
		// Strings, a bool, an int, a map of strings and a time.
		panic(fmt.Sprintf("oci: encoding a snapshot manifest: %v", err))
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

var snapshotName = regexp.MustCompile(`^[0-9a-f]{64}$`)

// checkSnapshotName refuses what cannot be a snapshot's name (it becomes
// a path).
func checkSnapshotName(name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("%w: snapshot name %q is not 64 lower-case hex digits", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// decodeManifest reads snapshot name's manifest from b, which must hash
// to the name.
func decodeManifest(name string, b []byte) (*snapshotManifest, error) {
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != name {
		return nil, fmt.Errorf("%w: snapshot %s: its manifest does not hash to its name; remove the template it belongs to and create it again", errdefs.ErrDataLoss, name)
	}
	var m snapshotManifest
	if err := json.Unmarshal(b, &m); err != nil || m.Version != manifestVersion {
		return nil, fmt.Errorf("%w: snapshot %s: unreadable manifest (version %d, %v); create its template again", errdefs.ErrDataLoss, name, m.Version, err)
	}
	return &m, nil
}

// policyDigest is the hex sha256 of everything in p that shapes a
// sandbox; a snapshot is restored only under the policy it was taken
// under. Of egress only whether it is on counts: the sandbox then has
// the proxy's interface and environment, the same whatever the proxy
// allows, so a run may narrow the allowlist, the credential routes or
// the byte cap (each enforced by its own proxy alone) and still fit.
func policyDigest(p isolation.Policy) string {
	w := struct {
		Isolation isolation.Mode
		Limits    isolation.Limits
		UID, GID  uint32
		Hostname  string
		Seccomp   string
		Egress    any
	}{p.Isolation, p.Limits, p.UID, p.GID, p.Hostname, "", isolation.Egress{}}
	if p.Seccomp != nil {
		w.Seccomp = p.Seccomp.SHA256
	}
	if p.Egress.On() {
		w.Egress = "proxy"
	}
	b, err := json.Marshal(w)
	if err != nil {
		panic(fmt.Sprintf("oci: encoding a policy: %v", err))
	}
	sum := sha256.Sum256(append([]byte("airlock-snapshot-policy-v1\n"), b...))
	return hex.EncodeToString(sum[:])
}

// snapshotWant is what a new sandbox asks of the snapshot it is restored
// from.
type snapshotWant struct {
	Image   digest.Digest
	Policy  string
	Runtime string
	Agent   bool
	BootID  bool
}

// agentVersion is the agent wire format a snapshot taken with the agent
// bound records, and a restore wants.
func agentVersion(bound bool) string {
	if !bound {
		return ""
	}
	return agent.Version
}

// fits refuses snapshot name, described by m, for a sandbox that wants w:
// each difference is named, with the fix. A snapshot that does not fit is
// never used, nor rebuilt here: only its template knows its warm program.
func (m *snapshotManifest) fits(name string, w snapshotWant) error {
	var why string
	switch {
	case m.Image != w.Image:
		why = fmt.Sprintf("it was taken of image %s, and the sandbox runs %s", m.Image, w.Image)
	case m.Policy != w.Policy:
		why = "it was taken under another policy (isolation, limits, seccomp profile, identity or egress): a template's snapshot serves only sandboxes with the template's exact policy, so leave out flags that narrow it"
	case m.Runtime != w.Runtime:
		why = fmt.Sprintf("it was taken under runsc %q, and this is runsc %q", m.Runtime, w.Runtime)
	case m.Agent != w.Agent:
		why = fmt.Sprintf("it was taken with the exec agent bound %v, and the sandbox would have it %v (is %s installed?)", m.Agent, w.Agent, "airlock-agent")
	case m.AgentVersion != agentVersion(w.Agent):
		why = fmt.Sprintf("it holds an exec agent speaking %s, and this airlock speaks %s (airlock was upgraded since)", cmp.Or(m.AgentVersion, "an earlier format"), agent.Version)
	case m.BootID != w.BootID:
		why = "it was taken before each sandbox had a boot id of its own (its mounts differ)"
	default:
		return nil
	}
	return fmt.Errorf("%w: snapshot %s does not fit: %s; create the template again with `airlock template create NAME --replace --warm ...`", errdefs.ErrInvalidArgument, name, why)
}

// unreopenedFile matches the line runsc logs when a restore cannot reopen
// a file the checkpoint holds open, because it is not in the new
// sandbox's mount: the first element of its path that is missing (Go
// quoted), that element's file type (octal, as st_mode) and the mount,
// named "<source>:<destination>". As the runsc `make setup` builds
// (20260905) log it:
//
//	failed to walk "x" of type 0100000 in mount "__no_name_0:/tmp": no such file or directory
//
// runsc tells it in no other way (its restore exits 128 whatever went
// wrong), so its own log is read for it; the name came from the sandbox,
// and is only ever quoted back.
var unreopenedFile = regexp.MustCompile(`failed to walk ("(?:[^"\\]|\\.)*") of type (0[0-7]*) in mount "(?:[^"\\]|\\.)*:(/[^"\\:]*)"`)

// unreopened reads, from runsc restore's log, the path inside the
// sandbox of the file it could not reopen, and whether that is a
// directory (the file held open is then beneath it); ok is false when
// the log says no such thing.
func unreopened(log []byte) (path string, dir, ok bool) {
	m := unreopenedFile.FindSubmatch(log)
	if m == nil {
		return "", false, false
	}
	name, err := strconv.Unquote(string(m[1]))
	if err != nil || name == "" {
		return "", false, false
	}
	mode, err := strconv.ParseUint(string(m[2]), 8, 32)
	if err != nil {
		return "", false, false
	}
	const sIFMT, sIFDIR = 0o170000, 0o040000
	dest := string(m[3])
	if dest != "/" {
		dest += "/"
	}
	return dest + name, mode&sIFMT == sIFDIR, true
}

// unreopenedError is the refusal of snapshot snap, whose restore failed
// as runsc's log says, when it failed for a file of the warming
// sandbox's own areas that the warm program kept open; nil otherwise. A
// restore from that snapshot can never succeed, so it is invalid input,
// as a snapshot that does not fit is: the fix is a new snapshot.
func unreopenedError(snap string, log []byte) error {
	p, dir, ok := unreopened(log)
	if !ok {
		return nil
	}
	what := strconv.Quote(p)
	if dir {
		what += " (or a file beneath it)"
	}
	return fmt.Errorf("%w: snapshot %s cannot be restored: its warm program kept %s open when the snapshot was taken, and a sandbox restored from it gets fresh /tmp, workspace and /out areas, where that file is not; "+
		"have the warm program close its files under /tmp, /home/user and /out before it creates its ready file, then create the template again (`airlock template create NAME --replace --warm ...`)",
		errdefs.ErrInvalidArgument, snap, what)
}
