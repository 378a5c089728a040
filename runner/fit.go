package runner

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/receipt"
)

// FitResult returns res, the sealed Result of one of the sandbox's execs,
// as it is when its JSON is at most maxBytes; else with its streams' heads
// and tails cut to the most bytes each that fit, those streams marked
// truncated, and its receipt signed again, by the runner's key, so that it
// agrees with the cut Result. What the program wrote is bound as before:
// each stream's total bytes and sha256 are unchanged, and the receipt's
// verdict is still the one on the whole stdout. An airlock node uses it to
// give a pod's Result in the pod's status, whose size is capped.
func (sb *Sandbox) FitResult(res Result, maxBytes int) (Result, error) {
	return sb.r.fitResult(res, maxBytes)
}

// fitResult is FitResult, signing with r's key.
func (r *Runner) fitResult(res Result, maxBytes int) (Result, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return res, fmt.Errorf("%w: encoding the Result: %v", errdefs.ErrInternal, err)
	}
	if len(b) <= maxBytes {
		return res, nil
	}
	if res.Receipt == nil || res.Receipt.Legacy() {
		return res, fmt.Errorf("%w: cutting Result %q to %d bytes: it has no receipt to sign again", errdefs.ErrInvalidArgument, res.ID, maxBytes)
	}
	if r.loadKey(); r.keyErr != nil {
		return res, fmt.Errorf("%w: receipt key: %v", errdefs.ErrUnavailable, r.keyErr)
	}
	if pub := r.key.Public().(ed25519.PublicKey); !bytes.Equal(res.Receipt.PublicKey, pub) {
		return res, fmt.Errorf("%w: cutting Result %q: its receipt is signed by key %s, not this root's (%s)",
			errdefs.ErrInvalidArgument, res.ID, res.Receipt.KeyID, receipt.KeyID(pub))
	}
	// cut is res with each stream piece kept to at most keep bytes, sealed
	// again, and whether it fits.
	cut := func(keep int) (Result, bool, error) {
		out := res
		out.Stdout, out.Stderr = cutStream(res.Stdout, keep), cutStream(res.Stderr, keep)
		rec := res.Receipt.Receipt
		rec.Stdout, rec.Stderr = streamOf(out.Stdout), streamOf(out.Stderr)
		signed, err := receipt.Sign(r.key, rec)
		if err != nil {
			return out, false, fmt.Errorf("%w: signing the cut Result %q again: %v", errdefs.ErrInternal, res.ID, err)
		}
		out.Policy, out.Receipt = &signed.Receipt.Policy, &signed
		b, err := json.Marshal(out)
		if err != nil {
			return out, false, fmt.Errorf("%w: encoding the Result: %v", errdefs.ErrInternal, err)
		}
		return out, len(b) <= maxBytes, nil
	}
	best, fits, err := cut(0)
	if err != nil {
		return res, err
	}
	if !fits {
		return res, fmt.Errorf("%w: Result %q does not fit in %d bytes even without its output", errdefs.ErrResourceExhausted, res.ID, maxBytes)
	}
	// The most bytes a piece keeps: lo fits, hi does not.
	lo, hi := 0, max(len(res.Stdout.Head), len(res.Stdout.Tail), len(res.Stderr.Head), len(res.Stderr.Tail))
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		out, fits, err := cut(mid)
		if err != nil {
			return res, err
		}
		if fits {
			lo, best = mid, out
		} else {
			hi = mid
		}
	}
	return best, nil
}

// cutStream is s with its head and its tail each kept to at most keep
// bytes (the head's first, the tail's last), a character split at neither
// cut where the bytes allow; s as it is when both already are. A stream
// that was whole becomes truncated: its head the first bytes, its tail the
// last, and the bytes between omitted.
func cutStream(s Stream, keep int) Stream {
	if len(s.Head) <= keep && len(s.Tail) <= keep {
		return s
	}
	out := s
	out.Truncated = true
	h := runeStartBefore(s.Head, min(keep, len(s.Head)))
	out.Head = bytes.Clone(s.Head[:h])
	if s.Truncated {
		t := runeStartAfter(s.Tail, len(s.Tail)-min(keep, len(s.Tail)))
		out.Tail = bytes.Clone(s.Tail[t:])
	} else {
		// The tail is the end of what the head held, after the head kept.
		t := runeStartAfter(s.Head, max(h, len(s.Head)-keep))
		out.Tail = bytes.Clone(s.Head[t:])
	}
	return out
}

// runeStartBefore moves cut i of b back to a character's start, by up to
// three bytes: b[:i] then ends in no split character.
func runeStartBefore(b []byte, i int) int {
	for k := 0; k < 3 && i > 0 && i < len(b) && !utf8.RuneStart(b[i]); k++ {
		i--
	}
	return i
}

// runeStartAfter moves cut i of b on to a character's start, by up to
// three bytes: b[i:] then starts with no split character.
func runeStartAfter(b []byte, i int) int {
	for k := 0; k < 3 && i < len(b) && !utf8.RuneStart(b[i]); k++ {
		i++
	}
	return i
}
