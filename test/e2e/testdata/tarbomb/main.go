// Command tarbomb is what code in a sandbox can do as root to the daemon's
// backups: dial the agent socket, present itself as the agent, and answer
// the daemon's archive request (a backup) with a tar that never ends:
//
//	tarbomb endless   a header for a 1 TiB file, then zeros for ever
//	tarbomb stall     a header, then nothing, for ever
//
// Every other request gets a 503. Like the impostor, it redials when the
// real agent takes the session back, so the two answer in turns.
package main

import (
	"archive/tar"
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
	if len(os.Args) != 2 || (os.Args[1] != "endless" && os.Args[1] != "stall") {
		fmt.Fprintln(os.Stderr, "usage: tarbomb endless|stall")
		os.Exit(2)
	}
	mode := os.Args[1]
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"version": "tarbomb-" + mode, "pid": os.Getpid()})
	})
	mux.HandleFunc("GET /v1/archive", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-tar")
		w.WriteHeader(http.StatusOK)
		tw := tar.NewWriter(w)
		_ = tw.WriteHeader(&tar.Header{Name: "bomb", Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg})
		_ = tw.Flush()
		w.(http.Flusher).Flush()
		if mode == "stall" {
			<-r.Context().Done()
			return
		}
		zeros := make([]byte, 256<<10)
		for {
			if _, err := w.Write(zeros); err != nil {
				return // the daemon hung up: the bomb was cut
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, `{"error":{"code":"unavailable","message":"tarbomb %s answers only backups"}}`, mode)
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
