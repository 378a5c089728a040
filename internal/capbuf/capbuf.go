// Package capbuf keeps the head of what a sandbox's process writes to the
// host, and drops the rest: what the host holds in memory for it is
// bounded whatever the process writes.
package capbuf

import "bytes"

// Buffer holds at most its first max bytes written. Write never fails,
// so the writer is drained to its end.
type Buffer struct {
	buf bytes.Buffer
	max int
}

// New returns a Buffer that keeps max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

func (b *Buffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes is the head kept.
func (b *Buffer) Bytes() []byte { return b.buf.Bytes() }

// String is the head kept.
func (b *Buffer) String() string { return b.buf.String() }
