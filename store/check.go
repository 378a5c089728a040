package store

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/units"
)

// LayerCheck applies UnpackLayer's rules to an image's layers without
// unpacking them, so that a hostile image is refused when it is imported,
// not when it first runs. It reads only tar headers, and follows what each
// layer leaves in place (symlinks, files, whiteouts) to catch an entry
// under a symlink, or a hardlink to nothing, that an earlier layer set up.
//
// Each path costs a map entry, charged against MaxPathBytes for the whole
// image; each entry a walk over its ancestors, which are bounded by the
// name's length (at most maxName bytes).
type LayerCheck struct {
	layer, seq int
	paths      pathBudget
	nodes      map[string]treeNode
	// replaced: path → seq at which an entry replaced it whole, which ends
	// everything below it that was written earlier.
	replaced map[string]int
	// hidden: path → layer whose whiteout hid it and everything below it
	// from lower layers; opaque: the same for what is below it only.
	hidden, opaque map[string]int
}

type treeNode struct {
	typ        byte // tar.TypeDir, TypeReg, TypeSymlink or TypeLink
	layer, seq int
}

// NewLayerCheck starts a check of one image, its lowest layer first.
func NewLayerCheck() *LayerCheck {
	return &LayerCheck{
		paths:    pathBudget{left: int64(MaxPathBytes), of: "one image"},
		nodes:    map[string]treeNode{".": {typ: tar.TypeDir}},
		replaced: map[string]int{}, hidden: map[string]int{}, opaque: map[string]int{},
	}
}

// Layer reads the headers of the next layer's uncompressed tar stream up to
// its end-of-archive marker. An error names the entry and wraps
// ErrUnsafeLayer where the layer itself is at fault.
func (c *LayerCheck) Layer(r io.Reader) error {
	c.layer++
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: reading layer: %v", ErrUnsafeLayer, err)
		}
		if err := c.entry(h); err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
}

func (c *LayerCheck) entry(h *tar.Header) error {
	if c.seq++; c.seq > MaxEntries {
		return fmt.Errorf("%w: the layers hold more than %d entries, the cap on one image", ErrLayerCap, MaxEntries)
	}
	name, kind, err := classify(h)
	if err != nil || kind == skipEntry || name == "." {
		return err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	if kind == whiteoutEntry {
		dir, base := path.Dir(name), path.Base(name)
		var m map[string]int
		switch {
		case base == whiteoutOpaque:
			m = c.opaque
		case !strings.HasPrefix(base, whiteoutMeta):
			m, dir = c.hidden, path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		default:
			return nil
		}
		k, err := keep(&c.paths, m, dir)
		if err != nil {
			return err
		}
		m[k] = c.layer
		return nil
	}
	if h.Typeflag == tar.TypeLink {
		target := path.Clean(h.Linkname)
		if err := c.parents(target); err != nil {
			return fmt.Errorf("hardlink target: %w", err)
		}
		if n, ok := c.live(target); !ok || n.typ == tar.TypeDir {
			return fmt.Errorf("%w: hardlink target %q is not a file an earlier entry made", ErrUnsafeLayer, target)
		}
	}
	old, exists := c.live(name)
	if h.Typeflag == tar.TypeDir && exists && old.typ == tar.TypeDir {
		return nil // merges into the directory
	}
	k, err := keep(&c.paths, c.nodes, name)
	if err != nil {
		return err
	}
	if h.Typeflag != tar.TypeDir || exists && old.typ != tar.TypeDir {
		if _, ok := c.replaced[k]; !ok {
			// The key shares its bytes with the node's: only the entry costs.
			if err := c.paths.charge(""); err != nil {
				return err
			}
		}
		c.replaced[k] = c.seq
	}
	c.nodes[k] = treeNode{typ: h.Typeflag, layer: c.layer, seq: c.seq}
	return nil
}

// What an image's layers may name. Each path LayerCheck keeps, and
// UnpackLayer for the layer it applies, costs a map entry and the path's
// own bytes, and the byte caps on layers do not bound that: a 200 KB gzip
// layer of 40,000 empty files, each 120 directories deep, names 4.9 million
// paths (395 MiB of maps, before these caps). Real images stay far below:
// a distribution base names a few thousand paths, a CUDA or conda image a
// few hundred thousand.
const (
	// MaxEntries caps the entries of an image's layers together, and so of
	// each layer. Each entry costs a walk over its ancestors (up to
	// maxDepth map lookups).
	MaxEntries = 1 << 21
	// MaxPathBytes caps what the paths kept take in memory: each new key
	// of a map is charged pathCost plus its length. A file costs the check
	// two keys: some 900,000 files of 80-byte names fit.
	MaxPathBytes units.Bytes = 256 << 20
	// pathCost is a map entry's share of memory at its worst, just after
	// the map has grown (TestLayerCheckPathCap measures it).
	pathCost = 112
)

// ErrLayerCap is wrapped, with ErrUnsafeLayer, when layers name more
// entries or paths than MaxEntries or MaxPathBytes allow.
var ErrLayerCap = fmt.Errorf("%w", ErrUnsafeLayer)

// pathBudget is what the paths a check or an unpack keeps may still take.
type pathBudget struct {
	left int64
	of   string // "one image", "one layer": what the cap applies to
}

// charge takes a new key of len(key) bytes from b.
func (b *pathBudget) charge(key string) error {
	if b.left -= pathCost + int64(len(key)); b.left < 0 {
		return fmt.Errorf("%w: the layers name more paths than fit in %s, the memory kept for the paths of %s", ErrLayerCap, MaxPathBytes, b.of)
	}
	return nil
}

// keep returns key as m may hold it: a copy of its own, so that m holds no
// more than the key's bytes (a name may be a slice of a PAX record block
// of up to 1 MiB, an ancestor a slice of a longer name). A key new to m is
// charged to b.
func keep[V any](b *pathBudget, m map[string]V, key string) (string, error) {
	if _, ok := m[key]; !ok {
		if err := b.charge(key); err != nil {
			return "", err
		}
	}
	return strings.Clone(key), nil
}

// parents refuses name if an ancestor is a symlink or not a directory, as
// UnpackLayer would, and records missing ancestors as the directories
// UnpackLayer creates. It walks down once, carrying what the ancestors
// above ended, so a deep name costs its depth, not its depth squared.
func (c *LayerCheck) parents(name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	var above ends
	above.add(c, ".")
	for i := 0; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		// A substring of name: no ancestor is a string of its own.
		p := dir[:i]
		n, ok := c.nodes[p]
		ok = ok && above.spare(n) && c.hidden[p] <= n.layer
		switch {
		case !ok:
			k, err := keep(&c.paths, c.nodes, p)
			if err != nil {
				return err
			}
			c.nodes[k] = treeNode{typ: tar.TypeDir, layer: c.layer, seq: c.seq}
		case n.typ == tar.TypeSymlink:
			return fmt.Errorf("%w: %q is under the symlink %q", ErrUnsafeLayer, name, p)
		case n.typ != tar.TypeDir:
			return fmt.Errorf("%w: %q is under %q, which is not a directory", ErrUnsafeLayer, name, p)
		}
		above.add(c, p)
	}
	return nil
}

// live returns what is at p now, if anything: the last entry written there,
// unless a later replacement or whiteout of p or an ancestor ended it.
func (c *LayerCheck) live(p string) (treeNode, bool) {
	n, ok := c.nodes[p]
	if !ok || c.hidden[p] > n.layer {
		return treeNode{}, false
	}
	var above ends
	for q := path.Dir(p); ; q = path.Dir(q) {
		above.add(c, q)
		if q == "." {
			break
		}
	}
	return n, above.spare(n)
}

// ends is what a set of ancestors ended: the latest replacement, and the
// highest layers whose whiteouts hid them or what is below them.
type ends struct{ replaced, hidden, opaque int }

func (e *ends) add(c *LayerCheck, q string) {
	e.replaced = max(e.replaced, c.replaced[q])
	e.hidden = max(e.hidden, c.hidden[q])
	e.opaque = max(e.opaque, c.opaque[q])
}

// spare reports whether n, below every ancestor added, survived them.
func (e *ends) spare(n treeNode) bool {
	return e.replaced <= n.seq && e.hidden <= n.layer && e.opaque <= n.layer
}
