// Command impostor is what code in a sandbox can do as root: dial the
// daemon's agent socket and present itself as the agent. It answers the
// health check like an agent, and every other request with the raw status
// line and error code it is given, which net/http would never write:
//
//	impostor NAME 'STATUS LINE' CODE
//
// e.g. impostor a '401 Unauthorized' unauthenticated. The real agent redials
// when its session is replaced, and so does the impostor: the session goes
// back and forth, and each answer says who gave it (NAME in the message).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/yamux"
)

const socket = "/.hotcell/run/agent.sock"

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: impostor NAME 'STATUS LINE' CODE")
		os.Exit(2)
	}
	name, status, code := os.Args[1], os.Args[2], os.Args[3]
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": "impostor " + name + " says no"}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"version": "impostor-" + name, "pid": os.Getpid()})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(buf, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(body), body)
		_ = buf.Flush()
	})
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	for {
		if nc, err := net.Dial("unix", socket); err == nil {
			if sess, err := yamux.Server(nc, cfg); err == nil {
				_ = http.Serve(sess, mux)
				sess.Close()
			}
		} else {
			fmt.Fprintln(os.Stderr, "dial:", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
