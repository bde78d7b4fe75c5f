// Command chanprobe is run inside a sandbox, as root, by the hostile agent
// channel tests: it reads the sandbox's own dial file and uses it against
// the daemon's TCP agent listener, and prints one line per result.
//
//	chanprobe neighbour ID      hello as sandbox ID with this sandbox's token
//	chanprobe forged N          N hellos as this sandbox with random tokens, and one of zeros
//	chanprobe second            hello as this sandbox with its own token, while its agent is up
//	chanprobe idle N SECONDS    N connections that send nothing (and N that trickle a
//	                            byte a second) held up to SECONDS: print how long the
//	                            daemon let the longest live
//	chanprobe plain             speak HTTP to the listener, without and with TLS
//
// A hello is "refused" when the daemon closes the connection without
// sending a byte (an accepted one gets a yamux frame: the health check).
package main

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type dial struct {
	Addr    string `json:"addr"`
	CertPEM string `json:"cert"`
	Sandbox string `json:"sandbox"`
	Token   string `json:"token"`
}

func main() {
	data, err := os.ReadFile("/.hotcell/run/agent-dial.json")
	if err != nil {
		fail(err)
	}
	var d dial
	if err := json.Unmarshal(data, &d); err != nil {
		fail(err)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "neighbour":
		fmt.Println("neighbour:", hello(d, args[0], d.Token))
	case "forged":
		n, _ := strconv.Atoi(args[0])
		counts := map[string]int{}
		for range n {
			b := make([]byte, 32)
			rand.Read(b)
			counts[hello(d, d.Sandbox, hex.EncodeToString(b))]++
		}
		counts[hello(d, d.Sandbox, strings.Repeat("0", 64))]++
		fmt.Println("forged:", counts)
	case "second":
		fmt.Println("second:", hello(d, d.Sandbox, d.Token))
	case "idle":
		n, _ := strconv.Atoi(args[0])
		secs, _ := strconv.Atoi(args[1])
		idle(d, n, time.Duration(secs)*time.Second)
	case "plain":
		plain(d)
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chanprobe:", err)
	os.Exit(2)
}

func tlsConf(d dial) *tls.Config {
	// The test is the daemon's own peer: it pins nothing (the agent does);
	// what matters here is what the daemon does with the hello.
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
}

// hello sends one hello and says whether the daemon took it.
func hello(d dial, id, token string) string {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", d.Addr, tlsConf(d))
	if err != nil {
		return "dial error: " + err.Error()
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "HCAGENT1 %s %s\n", id, token); err != nil {
		return "write error: " + err.Error()
	}
	_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	switch {
	case n > 0:
		return "accepted"
	case err == io.EOF || err != nil && strings.Contains(err.Error(), "reset"):
		return "refused"
	default:
		return "no answer: " + err.Error()
	}
}

// idle holds n silent and n trickling connections and reports how long
// the daemon kept the longest open.
func idle(d dial, n int, hold time.Duration) {
	var mu sync.Mutex
	var longest time.Duration
	opened := 0
	var wg sync.WaitGroup
	for i := range 2 * n {
		c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
		if err != nil {
			continue
		}
		opened++
		wg.Go(func() {
			defer c.Close()
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(hold))
			if i%2 == 1 {
				// A TLS record header, a byte a second.
				go func() {
					for _, b := range []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01} {
						if _, err := c.Write([]byte{b}); err != nil {
							return
						}
						time.Sleep(time.Second)
					}
				}()
			}
			_, _ = io.Copy(io.Discard, c)
			lived := time.Since(start)
			mu.Lock()
			longest = max(longest, lived)
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Printf("idle: opened %d, longest lived %ds\n", opened, int(longest.Round(time.Second).Seconds()))
}

// plain speaks HTTP to the listener, in clear and over TLS, and prints
// whether anything HTTP came back.
func plain(d dial) {
	req := "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n"
	c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(8 * time.Second))
		io.WriteString(c, req)
		b, _ := io.ReadAll(io.LimitReader(c, 4096))
		fmt.Printf("plain: http=%v\n", strings.Contains(string(b), "HTTP/"))
		c.Close()
	}
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", d.Addr, tlsConf(d))
	if err != nil {
		fmt.Println("tls: dial error:", err)
		return
	}
	_ = tc.SetDeadline(time.Now().Add(8 * time.Second))
	io.WriteString(tc, req)
	b, _ := io.ReadAll(io.LimitReader(tc, 4096))
	fmt.Printf("tls: http=%v bytes=%d\n", strings.Contains(string(b), "HTTP/"), len(b))
	tc.Close()
}
