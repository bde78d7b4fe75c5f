package docker_test

import "net"

// makeSocket leaves a unix socket file at p.
func makeSocket(p string) error {
	l, err := net.Listen("unix", p)
	if err != nil {
		return err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l.Close()
}
