package runner

import (
	"bytes"
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// recordWatch watches sandbox id's record for its supervisor. gone is
// closed once the record is removed (the last step of its destroy), so
// that the supervisor exits, and lets go of the image it pins, at once
// rather than at its next tick. changed receives (coalesced) whenever the
// record is written again, as a resume does, so that a supervisor waiting
// for its sandbox to run serves it at once. stop ends the watch. Where
// inotify is unavailable neither channel ever receives and the tick alone
// is left.
func recordWatch(root, id string) (gone, changed <-chan struct{}, stop func()) {
	gch, cch := make(chan struct{}), make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return gch, cch, func() {}
	}
	const written = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO
	if _, err := unix.InotifyAddWatch(fd, sandboxesDir(root), unix.IN_DELETE|unix.IN_MOVED_FROM|written); err != nil {
		unix.Close(fd)
		return gch, cch, func() {}
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
				mask := binary.NativeEndian.Uint32(b[4:8])
				size := int(binary.NativeEndian.Uint32(b[12:16]))
				if unix.SizeofInotifyEvent+size > len(b) {
					break
				}
				ev := bytes.TrimRight(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size], "\x00")
				b = b[unix.SizeofInotifyEvent+size:]
				if !bytes.Equal(ev, name) {
					continue
				}
				if mask&written == 0 {
					close(gch)
					return
				}
				select {
				case cch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return gch, cch, func() { f.Close() }
}
