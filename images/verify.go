package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/store"
	"github.com/airlock-sandbox/airlock/units"
)

// ErrDigest is wrapped when content does not match its digest or size.
var ErrDigest = errors.New("content does not match its digest")

// ErrTooLarge is wrapped when an image's layers hold more bytes,
// uncompressed, than Limits allow.
var ErrTooLarge = errors.New("image too large")

// errFixedCap is wrapped, with ErrTooLarge, when an image passes a cap
// that no flag raises.
var errFixedCap = fmt.Errorf("%w", ErrTooLarge)

// MaxLayers caps an image's layers. go-containerregistry reads a docker
// save archive from its start for every layer it opens, so the work grows
// with the square of the count (10,000 one-byte layers: minutes). dockerd
// refuses more than 125 (moby layer/layer_store.go, maxLayerDepth; overlay2
// stacks at most 128 lowers), so no image it built comes near.
const MaxLayers = 256

// The default Limits. A gzip or zstd layer expands up to about 32,000
// times over (a 1 MB blob to 32 GB), and every byte is read to check its
// diff_id and written when it is unpacked. Real images stay well below:
// a CUDA toolkit layer is a few GiB, a whole ML image rarely past 16 GiB.
const (
	DefaultMaxLayerSize units.Bytes = 8 << 30
	DefaultMaxImageSize units.Bytes = 16 << 30
)

// Limits caps what an image's layers hold uncompressed: their tar streams,
// counted as they are decompressed, so a layer is refused as soon as it
// passes a cap, not at its end. A zero field takes its default; there is no
// setting without a cap.
type Limits struct {
	// Layer caps each layer (DefaultMaxLayerSize).
	Layer units.Bytes
	// Image caps all the layers together (DefaultMaxImageSize).
	Image units.Bytes
}

func (l Limits) orDefault() Limits {
	if l.Layer <= 0 {
		l.Layer = DefaultMaxLayerSize
	}
	if l.Image <= 0 {
		l.Image = DefaultMaxImageSize
	}
	return l
}

// Verified describes an image whose every byte has been checked.
type Verified struct {
	// ID is the sha256 of the config blob.
	ID digest.Digest
	// Manifest is the manifest digest when the source had a manifest blob.
	Manifest digest.Digest
	// Size is the total of the layers' stored sizes.
	Size int64
	// Uncompressed is the total of the layers' uncompressed sizes.
	Uncompressed int64
	Layers       int
}

// Progress receives one line per verification step. It may be nil.
type Progress func(format string, args ...any)

// Verify reads every blob of src and checks it: the manifest against its
// descriptor, the config against the manifest, each layer blob against the
// manifest, and each layer's uncompressed content against the config's
// diff_ids. Each layer's entries are checked as store.UnpackLayer would
// apply them (store.LayerCheck), so a layer that would write outside its
// root is refused here, wrapping store.ErrUnsafeLayer. A layer that takes
// the uncompressed bytes past lim is refused as soon as it does, wrapping
// ErrTooLarge. ctx ends it early.
func Verify(ctx context.Context, src *Source, lim Limits, progress Progress) (Verified, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	lim = lim.orDefault()
	img := src.Image
	var v Verified
	if src.Manifest != nil {
		raw, err := img.RawManifest()
		if err != nil {
			return v, fmt.Errorf("reading manifest: %w", err)
		}
		if err := checkBytes("manifest", raw, src.Manifest.Digest, src.Manifest.Size); err != nil {
			return v, err
		}
		v.Manifest = digest.Digest(src.Manifest.Digest.String())
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return v, fmt.Errorf("reading config: %w", err)
	}
	// The store reads no more of a config than this: a larger one would
	// import, then fail every run.
	if len(rawCfg) > int(store.MaxConfig) {
		return v, fmt.Errorf("%w: config is %d bytes, over the %s cap", errFixedCap, len(rawCfg), store.MaxConfig)
	}
	sum := sha256.Sum256(rawCfg)
	v.ID = digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum[:]))
	cfg, err := img.ConfigFile()
	if err != nil {
		return v, fmt.Errorf("%w: parsing config: %v", ErrFormat, err)
	}
	// Before the manifest: a docker save archive's is computed by reading
	// every layer.
	if err := checkLayerCount(len(cfg.RootFS.DiffIDs)); err != nil {
		return v, err
	}
	m, err := img.Manifest()
	if err != nil {
		return v, fmt.Errorf("%w: reading manifest: %v", ErrFormat, err)
	}
	if err := checkLayerCount(len(m.Layers)); err != nil {
		return v, err
	}
	if src.Manifest != nil {
		if err := checkBytes("config", rawCfg, m.Config.Digest, m.Config.Size); err != nil {
			return v, err
		}
	}
	layers, err := img.Layers()
	if err != nil {
		return v, fmt.Errorf("%w: listing layers: %v", ErrFormat, err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) || (src.Manifest != nil && len(layers) != len(m.Layers)) {
		return v, fmt.Errorf("%w: %d layers but %d diff_ids in the config", ErrDigest, len(layers), len(cfg.RootFS.DiffIDs))
	}
	check := store.NewLayerCheck()
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return v, err
		}
		want := cfg.RootFS.DiffIDs[i]
		progress("verifying layer %d/%d (%s)", i+1, len(layers), want.Hex[:12])
		if src.Manifest != nil {
			d := m.Layers[i]
			rc, err := l.Compressed()
			if err != nil {
				return v, fmt.Errorf("reading layer %d: %w", i+1, err)
			}
			_, err = io.Copy(io.Discard, NewVerifier(rc, d.Digest, d.Size))
			rc.Close()
			if err != nil {
				return v, fmt.Errorf("layer %d blob: %w", i+1, err)
			}
			v.Size += d.Size
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return v, fmt.Errorf("reading layer %d: %w", i+1, err)
		}
		n, err := checkLayer(check, NewVerifier(capLayer(rc, lim, v.Uncompressed), want, -1))
		rc.Close()
		if err != nil {
			return v, fmt.Errorf("layer %d (%s): %w", i+1, want, err)
		}
		v.Uncompressed += n
		if src.Manifest == nil {
			v.Size += n
		}
	}
	v.Layers = len(layers)
	return v, nil
}

func checkLayerCount(n int) error {
	if n > MaxLayers {
		return fmt.Errorf("%w: the image has %d layers, over the cap of %d", errFixedCap, n, MaxLayers)
	}
	return nil
}

// checkLayer runs the layer's entries through check and reads the rest of
// r, so that the verifier sees every byte. A damaged stream is a digest
// error, not an unsafe layer: the verifier's error wins.
func checkLayer(check *store.LayerCheck, r *Verifier) (int64, error) {
	cerr := check.Layer(r)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return r.n, err
	}
	return r.n, cerr
}

// capLayer caps a layer's uncompressed stream r at lim.Layer, or at what
// lim.Image leaves after the earlier layers' done bytes if that is less.
func capLayer(r io.Reader, lim Limits, done int64) *capped {
	c := &capped{r: r, left: int64(lim.Layer),
		over: fmt.Errorf("%w: more than %s uncompressed, the cap on one layer (--max-layer-size)", ErrTooLarge, lim.Layer)}
	if left := int64(lim.Image) - done; left < c.left {
		c.left = left
		c.over = fmt.Errorf("%w: the layers hold more than %s uncompressed in all, the cap on one image (--max-image-size)", ErrTooLarge, lim.Image)
	}
	return c
}

// capped reads through to r and fails with over, at this read and every
// later one, as soon as more than left bytes have arrived.
type capped struct {
	r    io.Reader
	left int64
	over error
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.over
	}
	n, err := c.r.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return n, c.over
	}
	return n, err
}

func checkBytes(what string, b []byte, want v1.Hash, size int64) error {
	sum := sha256.Sum256(b)
	if want.Algorithm != "sha256" || want.Hex != hex.EncodeToString(sum[:]) {
		return fmt.Errorf("%w: %s is sha256:%x, expected %s", ErrDigest, what, sum, want)
	}
	if int64(len(b)) != size {
		return fmt.Errorf("%w: %s is %d bytes, expected %d", ErrDigest, what, len(b), size)
	}
	return nil
}

// Verifier reads through to r, counting and hashing. It fails with ErrDigest
// as soon as more than size bytes arrive (size < 0: no size check), and at
// EOF if the count or the digest is wrong.
type Verifier struct {
	r    io.Reader
	h    hash.Hash
	want v1.Hash
	size int64
	n    int64
}

// NewVerifier wraps r. Only sha256 digests are accepted.
func NewVerifier(r io.Reader, want v1.Hash, size int64) *Verifier {
	return &Verifier{r: r, h: sha256.New(), want: want, size: size}
}

func (v *Verifier) Read(p []byte) (int, error) {
	if v.want.Algorithm != "sha256" {
		return 0, fmt.Errorf("%w: unsupported digest algorithm %q", ErrDigest, v.want.Algorithm)
	}
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.h.Write(p[:n])
	if v.size >= 0 && v.n > v.size {
		return n, fmt.Errorf("%w: more than the %d bytes expected for %s", ErrDigest, v.size, v.want)
	}
	if err == io.EOF {
		if v.size >= 0 && v.n != v.size {
			return n, fmt.Errorf("%w: %d bytes, expected %d for %s", ErrDigest, v.n, v.size, v.want)
		}
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.Hex {
			return n, fmt.Errorf("%w: got sha256:%s, expected %s", ErrDigest, got, v.want)
		}
	}
	return n, err
}
