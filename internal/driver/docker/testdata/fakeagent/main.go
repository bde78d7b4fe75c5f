// Command fakeagent stands in for hotcell-agent in driver tests: as PID 1 it
// does nothing but wait for SIGTERM or SIGINT and exit 0, so tests can check
// that Stop delivers the signal (a clean exit code) and that the box stays up
// otherwise.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("fakeagent: ready, pid", os.Getpid())
	s := <-sig
	fmt.Println("fakeagent: got", s)
}
