package store

import (
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestEventsBoundedAndPruned(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		ctx := t.Context()
		s, err := Open(ctx, be.target(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		now := time.Now().UTC()
		if err := s.Put(ctx, wire.Sandbox{ID: "live", State: wire.StateRunning, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		for i := range MaxEventsPerSandbox + 10 {
			if _, err := s.AddEvent(ctx, wire.SandboxEvent{SandboxID: "live", Type: "x", Time: now, Fields: map[string]string{"i": string(rune('a' + i%26))}}); err != nil {
				t.Fatal(err)
			}
		}
		ev, err := s.AddEvent(ctx, wire.SandboxEvent{SandboxID: "gone", Type: wire.SandboxEventDestroyed, Time: now.Add(-48 * time.Hour)})
		if err != nil || ev.Seq == 0 {
			t.Fatalf("add: %+v %v", ev, err)
		}
		live, err := s.Events(ctx, EventFilter{SandboxID: "live", Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != MaxEventsPerSandbox {
			t.Errorf("kept %d events, want %d", len(live), MaxEventsPerSandbox)
		}
		if live[0].Seq != 11 || live[0].Fields["i"] != "k" {
			t.Errorf("oldest kept: got %+v, want seq 11", live[0])
		}
		after, _ := s.Events(ctx, EventFilter{After: live[len(live)-2].Seq})
		if len(after) != 2 || after[1].SandboxID != "gone" {
			t.Errorf("since: got %+v", after)
		}
		n, err := s.PruneEvents(ctx, now.Add(-24*time.Hour))
		if err != nil || n != 1 {
			t.Errorf("prune: %d %v, want the one old log of a sandbox without a record", n, err)
		}
		if has, _ := s.HasEvents(ctx, "live"); !has {
			t.Error("prune removed the log of a live sandbox")
		}

		// Activity: only for sandboxes with a record, and never backwards.
		if err := s.SetActivity(ctx, "live", now); err != nil {
			t.Fatal(err)
		}
		_ = s.SetActivity(ctx, "live", now.Add(-time.Hour))
		_ = s.SetActivity(ctx, "nobody", now)
		act, err := s.Activity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(act) != 1 || !act["live"].Equal(now) {
			t.Errorf("activity: got %v, want live at %v", act, now)
		}
		if err := s.Delete(ctx, "live"); err != nil {
			t.Fatal(err)
		}
		if act, _ := s.Activity(ctx); len(act) != 0 {
			t.Errorf("activity outlived its record: %v", act)
		}
	})
}
