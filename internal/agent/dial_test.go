package agent

import (
	"bytes"
	"crypto/tls"
	"io"
	"path/filepath"
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
