package images

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
)

// ErrNotPinned is wrapped by ParseRef when a reference carries no digest.
var ErrNotPinned = errors.New("image reference is not pinned by digest")

// ErrBadRef is wrapped by ParseRef when a reference cannot be read at all.
var ErrBadRef = errors.New("invalid image reference")

// Ref is a digest-pinned image reference. Name is informational: the image
// is found and checked by ID alone.
type Ref struct {
	// Name is the repository part, such as "airlock/default"; it may be empty.
	Name string
	// ID is the image ID: the sha256 of the image's config blob, which pins
	// every layer through the config's diff_ids.
	ID digest.Digest
}

// String returns "name@sha256:…", or the bare ID when there is no name.
func (r Ref) String() string {
	if r.Name == "" {
		return r.ID.String()
	}
	return r.Name + "@" + r.ID.String()
}

const pinnedForms = "use NAME@sha256:<64 hex digits> or sha256:<64 hex digits>; `airlock image ls` prints the pinned reference of every image airlock can run"

// ParseRef reads "sha256:<hex>" or "name@sha256:<hex>". A tag, a bare name or
// any other digest algorithm is refused: airlock never resolves a mutable
// name.
func ParseRef(s string) (Ref, error) {
	if s == "" {
		return Ref{}, fmt.Errorf("%w: empty reference: %s", ErrBadRef, pinnedForms)
	}
	if strings.HasPrefix(s, "sha256:") {
		d, err := parseDigest(s)
		if err != nil {
			return Ref{}, err
		}
		return Ref{ID: d}, nil
	}
	at := strings.LastIndex(s, "@")
	if at < 0 {
		if _, err := name.ParseReference(s); err != nil {
			return Ref{}, fmt.Errorf("%w: %q: %v: %s", ErrBadRef, s, err, pinnedForms)
		}
		repo := s
		if hasTag(s) {
			repo = s[:strings.LastIndex(s, ":")]
		}
		return Ref{}, fmt.Errorf("%w: %q names a tag, which can change under you. Pin it as %s@sha256:<64 hex digits>. "+
			"`airlock image ls` prints the pinned reference of every imported image; for an image already in Docker, "+
			"`docker image inspect --format '{{.Id}}' %s` prints its ID", ErrNotPinned, s, repo, s)
	}
	repo, dig := s[:at], s[at+1:]
	if hasTag(repo) {
		return Ref{}, fmt.Errorf("%w: %q carries both a tag and a digest; drop the tag: %s", ErrBadRef, s, pinnedForms)
	}
	if _, err := name.NewRepository(repo); err != nil {
		return Ref{}, fmt.Errorf("%w: %q: repository name %q: %v", ErrBadRef, s, repo, err)
	}
	d, err := parseDigest(dig)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Name: repo, ID: d}, nil
}

// hasTag reports whether a repository string ends in ":tag" (a colon after
// the last slash; a colon before it is a registry port).
func hasTag(repo string) bool {
	slash := strings.LastIndex(repo, "/")
	return strings.Contains(repo[slash+1:], ":")
}

func parseDigest(s string) (digest.Digest, error) {
	d, err := digest.Parse(s)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("%w: digest %q is not sha256:<64 lowercase hex digits>: %s", ErrBadRef, s, pinnedForms)
	}
	return d, nil
}
