package runner

import (
	"bytes"
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// recordGone returns a channel that receives once sandbox id's record is
// removed (the last step of its destroy), so that its supervisor exits,
// and lets go of the image it pins, at once rather than at its next tick.
func recordGone(root, id string) (gone <-chan struct{}, stop func()) {
	return recordEvents(root, id, unix.IN_DELETE|unix.IN_MOVED_FROM)
}

// recordWritten returns a channel that receives whenever sandbox id's
// record is written again, as a resume does. Every supervisor watches the
// one directory of records, so only one waiting for its sandbox's resume
// watches writes, which are many.
func recordWritten(root, id string) (written <-chan struct{}, stop func()) {
	return recordEvents(root, id, unix.IN_CREATE|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO)
}

// recordEvents returns a channel that receives (coalesced) each inotify
// event of mask on sandbox id's record. stop ends the watch. Where inotify
// is unavailable the channel never receives and the caller's tick alone
// is left.
func recordEvents(root, id string, mask uint32) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return ch, func() {}
	}
	if _, err := unix.InotifyAddWatch(fd, sandboxesDir(root), mask); err != nil {
		unix.Close(fd)
		return ch, func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	name := []byte(id + ".json")
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return // stopped
			}
			for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
				size := int(binary.NativeEndian.Uint32(b[12:16]))
				if unix.SizeofInotifyEvent+size > len(b) {
					break
				}
				ev := bytes.TrimRight(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size], "\x00")
				b = b[unix.SizeofInotifyEvent+size:]
				if bytes.Equal(ev, name) {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	return ch, func() { f.Close() }
}
