package agent

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/driver"
)

// TestTLSDialerPinsDaemon: the agent's dialer completes its handshake only
// with the daemon whose certificate it pins, and then sends its hello; to
// an impostor on the same address (another certificate) it sends nothing,
// so its credential never leaves the box for anyone else.
func TestTLSDialerPinsDaemon(t *testing.T) {
	t.Parallel()
	daemon, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "daemon"))
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "impostor"))
	if err != nil {
		t.Fatal(err)
	}
	token := agentauth.Token(daemon.TokenKey, "sb-1")
	for _, tc := range []struct {
		name     string
		server   *agentauth.Material
		wantSent bool
	}{
		{"the daemon", daemon, true},
		{"an impostor", impostor, false},
	} {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", tc.server.ServerConfig())
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			b, _ := io.ReadAll(io.LimitReader(c, agentauth.MaxHello))
			got <- b
		}()
		dial, err := TLSDialer(driver.AgentDial{Addr: ln.Addr().String(), CertPEM: string(daemon.CertPEM), Sandbox: "sb-1", Token: token})
		if err != nil {
			t.Fatal(err)
		}
		nc, derr := dial(t.Context())
		if derr == nil {
			nc.Close()
		}
		b := <-got
		ln.Close()
		sent := bytes.Contains(b, []byte(token))
		if sent != tc.wantSent || (derr == nil) != tc.wantSent {
			t.Errorf("%s: dial error %v, credential sent %v; want sent %v", tc.name, derr, sent, tc.wantSent)
		}
	}
}

// helloServer is a daemon's agent listener reduced to its handshake: it
// completes TLS with m's certificate, reads each hello and reports those
// whose credential checks out. It returns its address.
func helloServer(t *testing.T, m *agentauth.Material) (string, <-chan agentauth.Hello) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan agentauth.Hello, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				h, err := agentauth.ReadHello(c)
				if err == nil && agentauth.Verify(m.TokenKey, h) {
					got <- h
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

// deadAddr is a loopback address nothing listens on: a dial is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentAddr accepts TCP connections (the kernel's backlog does) and never
// answers: a daemon that hangs, or a host that is going away.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// dialedTo dials once and says which server got the agent's hello (-1
// for none), checking the hello is the sandbox's.
func dialedTo(t *testing.T, dial Dialer, servers ...<-chan agentauth.Hello) int {
	t.Helper()
	nc, err := dial(t.Context())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer nc.Close()
	for {
		for i, s := range servers {
			select {
			case h := <-s:
				if h.Sandbox != "sb-1" {
					t.Errorf("hello for %q, want sb-1", h.Sandbox)
				}
				return i
			default:
			}
		}
		select {
		case <-t.Context().Done():
			return -1
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestTLSDialerTriesEachAddress: with the listeners of several daemons,
// a dial passes over an address whose daemon is gone (refused at once)
// or silent (its handshake times out) and reaches a live one; each dial
// starts after the address of the last session, so an agent whose
// session ended tries another daemon first; when none answers the error
// names each address.
func TestTLSDialerTriesEachAddress(t *testing.T) {
	t.Parallel()
	m, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "daemon"))
	if err != nil {
		t.Fatal(err)
	}
	to := dialTimeouts{connect: 3 * time.Second, handshake: 300 * time.Millisecond}
	dialer := func(addrs ...string) Dialer {
		t.Helper()
		d := driver.NewAgentDial(addrs, string(m.CertPEM), "sb-1", agentauth.Token(m.TokenKey, "sb-1"))
		dial, err := tlsDialer(*d, to)
		if err != nil {
			t.Fatal(err)
		}
		return dial
	}
	a, helloA := helloServer(t, m)
	b, helloB := helloServer(t, m)
	dead, silent := deadAddr(t), silentAddr(t)

	t.Run("dead then live", func(t *testing.T) {
		dial := dialer(dead, a)
		for i := range 3 {
			if got := dialedTo(t, dial, helloA); got != 0 {
				t.Errorf("dial %d: reached %d, want the live daemon", i, got)
			}
		}
	})
	t.Run("silent then live", func(t *testing.T) {
		if got := dialedTo(t, dialer(silent, b), helloB); got != 0 {
			t.Errorf("reached %d, want the live daemon", got)
		}
	})
	t.Run("each session's end moves on", func(t *testing.T) {
		dial := dialer(a, b)
		var got []int
		for range 4 {
			got = append(got, dialedTo(t, dial, helloA, helloB))
		}
		if want := []int{0, 1, 0, 1}; !slices.Equal(got, want) {
			t.Errorf("daemons reached %v, want %v", got, want)
		}
	})
	t.Run("none answers", func(t *testing.T) {
		dead2 := deadAddr(t)
		_, err := dialer(dead, dead2)(t.Context())
		if err == nil || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), dead2) {
			t.Errorf("dial error %v, want one naming %s and %s", err, dead, dead2)
		}
	})
}

// TestDialFileAddrs: a dial file with several addresses keeps the first
// in addr, so an agent that knows addr alone still reaches a daemon, and
// an agent reads a file written before addrs (addr alone).
func TestDialFileAddrs(t *testing.T) {
	t.Parallel()
	d := driver.NewAgentDial([]string{"10.0.0.1:8091", "10.0.0.2:8091"}, "cert", "sb-1", "secret-credential")
	data, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var old struct {
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal(data, &old); err != nil || old.Addr != "10.0.0.1:8091" {
		t.Errorf("addr of the new file %q (%v), want the first address", old.Addr, err)
	}
	got, err := parseDial("new", data)
	if err != nil || !slices.Equal(got.Addresses(), []string{"10.0.0.1:8091", "10.0.0.2:8091"}) {
		t.Errorf("new file: addresses %v (%v), want both", got.Addresses(), err)
	}
	got, err = parseDial("old", []byte(`{"addr":"10.0.0.1:8091","cert":"cert","sandbox":"sb-1","token":"tok"}`))
	if err != nil || !slices.Equal(got.Addresses(), []string{"10.0.0.1:8091"}) {
		t.Errorf("old file: addresses %v (%v), want its addr", got.Addresses(), err)
	}
	for _, bad := range []string{`{"cert":"cert"}`, `{"addrs":["10.0.0.1"],"addr":"10.0.0.1","cert":"cert"}`} {
		if _, err := parseDial("bad", []byte(bad)); err == nil {
			t.Errorf("%s: parsed, want an error", bad)
		}
	}
	if s := fmt.Sprint(*d); strings.Contains(s, "secret-credential") {
		t.Errorf("formatted dial file %q shows the credential", s)
	}
}
