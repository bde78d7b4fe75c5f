package api

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// populateManager records the create it was asked for.
type populateManager struct {
	Manager // unused methods panic
	req     wire.CreateSandboxRequest
	co      sandbox.CreateOptions
}

func (m *populateManager) Create(ctx context.Context, req wire.CreateSandboxRequest, co sandbox.CreateOptions) (wire.Sandbox, error) {
	m.req, m.co = req, co
	return wire.Sandbox{ID: "sb1", State: wire.StateRunning, Image: req.Image}, nil
}

// snapshotBackups resolves every snapshot to image "snap-image" and a
// restore of backup bk-000000000001, as backup.Service does from its store.
type snapshotBackups struct {
	Backups // unused methods panic
	ran     bool
}

func (b *snapshotBackups) PrepareCreate(ctx context.Context, req *wire.CreateSandboxRequest) (func(context.Context, string, *agentconn.Conn) error, error) {
	if req.Snapshot == "" && req.Restore == nil {
		return nil, nil
	}
	if req.Snapshot != "" {
		req.Image = "snap-image"
		req.Restore = &wire.RestoreSource{SandboxID: "src", BackupID: "bk-000000000001"}
	}
	return func(context.Context, string, *agentconn.Conn) error { b.ran = true; return nil }, nil
}

// TestCreateFromSnapshot checks that a create naming a snapshot or a
// backup reaches the manager rewritten by the backup service and with its
// populate step, and that without backups it is refused naming the field.
func TestCreateFromSnapshot(t *testing.T) {
	t.Parallel()
	post := func(o Options, body string) *httptest.ResponseRecorder {
		o.Token, o.Log = "t", slog.New(slog.DiscardHandler)
		req := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		New(o).Handler().ServeHTTP(rec, req)
		return rec
	}

	m, bk := &populateManager{}, &snapshotBackups{}
	if rec := post(Options{Manager: m, Backups: bk}, `{"snapshot":"sn-000000000001"}`); rec.Code != 201 {
		t.Fatalf("create from a snapshot: %d %s", rec.Code, rec.Body)
	}
	if m.req.Image != "snap-image" || m.req.Restore == nil || m.co.Populate == nil {
		t.Fatalf("manager got %+v with populate %v; want the snapshot's image, its restore and a populate step", m.req, m.co.Populate != nil)
	}
	if err := m.co.Populate(t.Context(), "sb1", nil); err != nil || !bk.ran {
		t.Errorf("populate step: %v, ran %v; want the backup service's", err, bk.ran)
	}

	m = &populateManager{}
	if rec := post(Options{Manager: m, Backups: bk}, `{"image":"img"}`); rec.Code != 201 || m.co.Populate != nil {
		t.Errorf("plain create: %d, populate %v; want 201 and no populate step", rec.Code, m.co.Populate != nil)
	}

	for body, field := range map[string]string{
		`{"snapshot":"sn-000000000001"}`:                                             "snapshot",
		`{"image":"img","restore":{"sandboxId":"src","backupId":"bk-000000000001"}}`: "restore",
	} {
		rec := post(Options{Manager: &populateManager{}}, body)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), field+": ") {
			t.Errorf("create with %s and no backups: %d %s, want 400 naming %s", body, rec.Code, rec.Body, field)
		}
	}
}
