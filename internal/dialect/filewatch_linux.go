//go:build linux

package dialect

import (
	"encoding/binary"
	"errors"
	"os"
	"syscall"
)

// fileWatchSupported: Linux reports file changes through inotify.
const fileWatchSupported = true

// fileWatch reports changes to one file through an inotify descriptor
// that Go's poller waits on, so that Close ends a Wait in progress.
type fileWatch struct {
	f   *os.File
	buf [4096]byte
}

// errWatchEnded is returned by Wait when the watched file was removed or
// renamed: the watch no longer sees what is written under its name.
var errWatchEnded = errors.New("the file was removed or renamed")

func watchFile(name string) (*fileWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	const mask = syscall.IN_MODIFY | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF
	if _, err := syscall.InotifyAddWatch(fd, name, mask); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("inotify_add_watch", err)
	}
	return &fileWatch{f: os.NewFile(uintptr(fd), "inotify:"+name)}, nil
}

// Wait blocks until the file has changed at least once since the last
// Wait. It returns an error when the watch was closed or the file is gone.
func (w *fileWatch) Wait() error {
	n, err := w.f.Read(w.buf[:])
	if err != nil {
		return err
	}
	for off := 0; off+syscall.SizeofInotifyEvent <= n; {
		mask := binary.NativeEndian.Uint32(w.buf[off+4:])
		if mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF|syscall.IN_IGNORED) != 0 {
			return errWatchEnded
		}
		off += syscall.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(w.buf[off+12:]))
	}
	return nil
}

// Close ends the watch; a Wait in progress returns an error.
func (w *fileWatch) Close() error { return w.f.Close() }
