// Command hotcell is the hotcell daemon (hotcell serve) and its command-line
// client for sandboxes: create, list, exec, copy files, and more.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
