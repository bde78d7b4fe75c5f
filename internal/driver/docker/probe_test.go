package docker_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/errdefs"
)

func TestProbeRealEngine(t *testing.T) {
	t.Parallel()
	d, _ := newDriver(t)
	if err := d.Probe(t.Context()); err != nil {
		t.Fatalf("probe: %v", err)
	}
}

// TestProbeNewConnections: Probe answers what a new connection gets, so an
// engine that closed its listener to shut down is down even while a pooled
// connection still answers, and one that accepts but never answers (a
// socket systemd holds for a dockerd that is not there yet) is down too.
func TestProbeNewConnections(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("/tmp", "hcprobe") // short: a unix socket path fits in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		w.Write([]byte("OK"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	d, err := docker.New(client.WithHost("unix://" + sock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	probe := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		return d.Probe(ctx)
	}
	if err := probe(); err != nil {
		t.Fatalf("probe of a listening engine: %v", err)
	}
	// A pooled connection of the client, open across the listener's close.
	if _, err := d.Client().Ping(t.Context(), client.PingOptions{}); err != nil {
		t.Fatalf("ping: %v", err)
	}
	ln.Close()
	if _, err := d.Client().Ping(t.Context(), client.PingOptions{}); err != nil {
		t.Fatalf("ping on the pooled connection after the listener closed: %v (the premise of Probe)", err)
	}
	if err := probe(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("probe after the listener closed: got %v, want unavailable", err)
	}

	// Accepted but never answered.
	os.Remove(sock)
	mute, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	// The listener never answers, so only probe's context can end this.
	if err := probe(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("probe of a mute listener: got %v, want unavailable", err)
	}
}
