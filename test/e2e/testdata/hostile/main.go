// Command hostile is a sandbox's root playing a hostile agent on the
// daemon's agent socket, for TestHostileAgent:
//
//	hostile SECONDS
//
// For that long it floods the socket with connections that say nothing (up
// to 2,000 at once, each held until the daemon closes it, or 10 s); serves
// the agent protocol and answers the health check, and every other request,
// with never-ending bodies, never-ending headers, a trickle (slow-loris),
// bytes that are not HTTP, or bogus statuses; passes the health check and
// then answers the daemon's requests with the same, so that answers to API
// calls are hostile too; and opens streams of its own and floods pings.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

const socket = "/.hotcell/run/agent.sock"

var chunk = []byte(strings.Repeat("A", 32<<10))

// answers are the hostile ways to answer one request; healthy answers the
// health check properly first and is hostile after.
var answers = []func(w http.ResponseWriter, r *http.Request){
	// A never-ending JSON string, as the health check's answer or any other.
	func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"version":"`)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	},
	// A never-ending error document.
	func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"unavailable","message":"`)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	},
	// Never-ending headers.
	raw(func(buf *bufio.ReadWriter) {
		buf.WriteString("HTTP/1.1 200 OK\r\n")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(buf, "X-Hostile-%d: %s\r\n", i, chunk[:1000]); err != nil {
				return
			}
		}
	}),
	// Slow-loris: a byte at a time, a while apart.
	raw(func(buf *bufio.ReadWriter) {
		for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"version\":\"") {
			buf.WriteByte(b)
			if buf.Flush() != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}),
	// Not HTTP.
	raw(func(buf *bufio.ReadWriter) {
		buf.WriteString("\x00\x01\x02 hello daemon \xff\xfe\r\n\r\n")
		buf.Write(chunk)
		buf.Flush()
	}),
	// Bogus statuses.
	raw(func(buf *bufio.ReadWriter) {
		buf.WriteString("HTTP/1.1 999 Bogus\r\nContent-Length: 5\r\n\r\nhello")
		buf.Flush()
	}),
	raw(func(buf *bufio.ReadWriter) {
		buf.WriteString("HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\n{}")
		buf.Flush()
	}),
	raw(func(buf *bufio.ReadWriter) {
		for range 1000 {
			if _, err := buf.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: -7\r\n\r\n")
		buf.Flush()
	}),
	// A chunked body whose chunk is larger than anything sent.
	raw(func(buf *bufio.ReadWriter) {
		buf.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n")
		for {
			if _, err := buf.Write(chunk); err != nil {
				return
			}
		}
	}),
}

func raw(f func(buf *bufio.ReadWriter)) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		f(buf)
		buf.Flush()
	}
}

func main() {
	secs, err := strconv.Atoi(os.Args[len(os.Args)-1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: hostile SECONDS")
		os.Exit(2)
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	var wg sync.WaitGroup
	// The connection flood: up to 2,000 silent connections open at once,
	// each held until the daemon closes it (or 10 s), and redialled.
	for range 8 {
		wg.Go(func() {
			open := make(chan struct{}, 250)
			for time.Now().Before(end) {
				open <- struct{}{}
				nc, err := net.Dial("unix", socket)
				if err != nil {
					<-open
					time.Sleep(10 * time.Millisecond)
					continue
				}
				go func() {
					defer func() { <-open }()
					nc.SetReadDeadline(time.Now().Add(10 * time.Second))
					io.Copy(io.Discard, nc)
					nc.Close()
				}()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	// Sessions that answer hostile from the health check on, and sessions
	// that pass it and are hostile after, one way after another.
	for i := range 2 * len(answers) {
		wg.Go(func() {
			for n := 0; time.Now().Before(end); n++ {
				serve(answers[(i+n)%len(answers)], i%2 == 1, n%3 == 0, end)
			}
		})
	}
	wg.Wait()
}

// serve dials the socket and serves answer on the session until it ends;
// healthy answers the health check like an agent, streams also opens
// streams and floods pings once the session is up.
func serve(answer func(w http.ResponseWriter, r *http.Request), healthy, streams bool, end time.Time) {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		time.Sleep(10 * time.Millisecond)
		return
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	sess, err := yamux.Server(nc, cfg)
	if err != nil {
		nc.Close()
		return
	}
	defer sess.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if healthy && r.URL.Path == "/v1/health" {
			json.NewEncoder(w).Encode(map[string]any{"version": "hostile", "pid": os.Getpid()})
			if streams {
				go func() {
					time.Sleep(time.Second)
					for range 200 {
						go sess.Ping()
					}
					sess.OpenStream()
				}()
			}
			return
		}
		answer(w, r)
	})
	srv := &http.Server{Handler: mux}
	go func() {
		select {
		case <-sess.CloseChan():
		case <-time.After(time.Until(end)):
		}
		srv.Close()
	}()
	srv.Serve(sess)
}
