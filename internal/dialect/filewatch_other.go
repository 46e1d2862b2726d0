//go:build !linux

package dialect

import "errors"

// fileWatchSupported: only Linux's inotify is used; elsewhere SQLite
// candidates in other processes wait for their tick.
const fileWatchSupported = false

type fileWatch struct{}

func watchFile(string) (*fileWatch, error) { return nil, errors.ErrUnsupported }

func (*fileWatch) Wait() error  { return errors.ErrUnsupported }
func (*fileWatch) Close() error { return nil }
