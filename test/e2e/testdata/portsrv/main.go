// Command portsrv is a small static server that ports tests and benchmarks
// upload into a sandbox:
//
//	portsrv http PORT   "portsrv PORT\n" at /; WebSocket echo at /ws;
//	                    /stream sends "first\n", then waits for
//	                    /tmp/portsrv-release to exist and sends "last\n"
//	                    /sw.js is a service worker script that asks for the
//	                    scope "/" with Service-Worker-Allowed
//	                    POST /post appends its body and a newline to
//	                    /tmp/portsrv-posts and answers "ok"
//	portsrv source PORT BYTES   each connection gets BYTES zero bytes, then EOF
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: portsrv http PORT | portsrv source PORT BYTES")
		os.Exit(2)
	}
	addr := "127.0.0.1:" + os.Args[2]
	switch os.Args[1] {
	case "http":
		mux := http.NewServeMux()
		mux.HandleFunc("/ws", echo)
		mux.HandleFunc("/stream", stream)
		mux.HandleFunc("/sw.js", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			w.Header().Set("Service-Worker-Allowed", "/")
			io.WriteString(w, "self.addEventListener('fetch', e => e.respondWith(fetch(e.request)));\n")
		})
		mux.HandleFunc("POST /post", post)
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "portsrv "+os.Args[2]+"\n")
		})
		fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, mux))
	case "source":
		n, _ := strconv.ParseInt(os.Args[3], 10, 64)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		zero := make([]byte, 256<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() {
				defer c.Close()
				left := n
				for left > 0 {
					k, err := c.Write(zero[:min(int64(len(zero)), left)])
					if err != nil {
						return
					}
					left -= int64(k)
				}
			}()
		}
	}
	os.Exit(1)
}

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	for {
		typ, data, err := c.Read(r.Context())
		if err != nil {
			return
		}
		if err := c.Write(r.Context(), typ, append([]byte("echo:"), data...)); err != nil {
			return
		}
	}
}

func post(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10))
	f, err := os.OpenFile("/tmp/portsrv-posts", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	f.Write(append(body, '\n'))
	io.WriteString(w, "ok")
}

func stream(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "first\n")
	w.(http.Flusher).Flush()
	for i := 0; i < 600; i++ {
		if _, err := os.Stat("/tmp/portsrv-release"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	io.WriteString(w, "last\n")
}
