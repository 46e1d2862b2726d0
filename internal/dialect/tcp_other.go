//go:build !linux

package dialect

import (
	"syscall"
	"time"
)

// tcpUserTimeout sets nothing outside Linux: TCP_USER_TIMEOUT is Linux's.
func tcpUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
