package store

import (
	"errors"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

func TestDaemonRegistry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		for _, d := range []Daemon{{"a", "https://10.0.0.1:8080", t0}, {"b", "http://b.local:8080", t0.Add(time.Second)}} {
			if err := s.Heartbeat(ctx, d.ID, d.URL, d.HeartbeatAt); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Heartbeat(ctx, "a", "https://10.0.0.1:8080", t0.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		ds, err := s.Daemons(ctx)
		if err != nil || len(ds) != 2 || ds[0].ID != "a" || !ds[0].HeartbeatAt.Equal(t0.Add(5*time.Second)) || ds[1].URL != "http://b.local:8080" {
			t.Fatalf("daemons: %+v, %v", ds, err)
		}
		if !ds[0].Alive(t0.Add(4*time.Second)) || ds[1].Alive(t0.Add(4*time.Second)) {
			t.Errorf("alive after t0+4s: a %v, b %v; want a only", ds[0].Alive(t0.Add(4*time.Second)), ds[1].Alive(t0.Add(4*time.Second)))
		}
		for _, bad := range []struct{ id, url, field string }{{"", "http://x", "id"}, {"c", "ftp://x", "url"}, {"c", "http://", "url"}, {"c", "::", "url"}} {
			if err := s.Heartbeat(ctx, bad.id, bad.url, t0); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("heartbeat(%q, %q): got %v, want invalid %s", bad.id, bad.url, err, bad.field)
			}
		}

		if _, ok, err := s.SessionHolder(ctx, "sb1"); ok || err != nil {
			t.Fatalf("holder of a session nobody holds: ok %v, %v", ok, err)
		}
		if err := s.HoldSession(ctx, "sb1", "a", t0); err != nil {
			t.Fatal(err)
		}
		if d, ok, err := s.SessionHolder(ctx, "sb1"); !ok || err != nil || d.ID != "a" || d.URL != "https://10.0.0.1:8080" {
			t.Fatalf("holder: %+v %v %v, want a", d, ok, err)
		}
		// The agent redials b: b holds it, and a's late drop leaves it.
		if err := s.HoldSession(ctx, "sb1", "b", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.DropSession(ctx, "sb1", "a"); err != nil {
			t.Fatal(err)
		}
		if d, ok, _ := s.SessionHolder(ctx, "sb1"); !ok || d.ID != "b" {
			t.Fatalf("holder after a's late drop: %+v %v, want b", d, ok)
		}
		if err := s.HoldSession(ctx, "sb2", "a", t0); err != nil {
			t.Fatal(err)
		}
		// b stops cleanly: it and its sessions go; a's stay.
		if err := s.Unregister(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.SessionHolder(ctx, "sb1"); ok {
			t.Error("sb1 still has a holder after b unregistered")
		}
		if d, ok, _ := s.SessionHolder(ctx, "sb2"); !ok || d.ID != "a" {
			t.Errorf("sb2 after b unregistered: %+v %v, want a", d, ok)
		}
		if err := s.DropSession(ctx, "sb2", "a"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.SessionHolder(ctx, "sb2"); ok {
			t.Error("sb2 still held after a dropped it")
		}
		if ds, _ := s.Daemons(ctx); len(ds) != 1 || ds[0].ID != "a" {
			t.Errorf("daemons after b unregistered: %+v", ds)
		}
	})
}
