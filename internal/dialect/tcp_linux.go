package dialect

import (
	"strings"
	"syscall"
	"time"
)

// linuxTCPUserTimeout is TCP_USER_TIMEOUT, the same on every Linux
// architecture (the syscall package lacks it on some).
const linuxTCPUserTimeout = 0x12

// tcpUserTimeout returns a net.Dialer Control function that sets
// TCP_USER_TIMEOUT to d on TCP sockets (not on Unix sockets).
func tcpUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, linuxTCPUserTimeout, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
