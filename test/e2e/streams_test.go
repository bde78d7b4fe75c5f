package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// TestHostEventsFollowerSurvivesNeighbourRemoved: a follower of /v1/events
// goes on when a neighbour sandbox's container is removed behind the
// daemon's back. The neighbour's "error" event is an event like any other,
// not the stream's failure, and what happens afterwards (a later create)
// still arrives.
func TestHostEventsFollowerSurvivesNeighbourRemoved(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	// Bounds a hang, not the test's speed: a dead follower fails below.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	evs, err := d.C.SandboxEvents(ctx, neighbour.ID, client.EventsOptions{})
	if err != nil || len(evs) == 0 {
		t.Fatalf("events of %s: %v %v", neighbour.ID, evs, err)
	}
	host, err := d.C.FollowHostEvents(ctx, client.EventsOptions{Since: evs[len(evs)-1].Seq})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	docker(t, "rm", "-f", "hotcell-"+neighbour.ID)
	waitState(t, d.C, neighbour.ID, client.StateError, 30*time.Second)
	later := newSandbox(t, d, client.CreateSandboxRequest{})

	var sawError, sawLater bool
	for !sawError || !sawLater {
		ev, err := host.Next()
		if err != nil {
			t.Fatalf("host follower ended: %v (neighbour's error event seen: %v, later create seen: %v)", err, sawError, sawLater)
		}
		switch {
		case ev.SandboxID == neighbour.ID && ev.Type == "error":
			if !strings.Contains(ev.Message, "behind the daemon's back") {
				t.Errorf("neighbour's error event: got %q, want the reason", ev.Message)
			}
			sawError = true
		case ev.SandboxID == later.ID && ev.Type == "created":
			if !sawError {
				t.Errorf("the later create came before the neighbour's error event")
			}
			sawLater = true
		}
	}
}

// TestExecStreamClientStopsReading: a client that opens an exec stream of
// endless output and never reads loses the stream once a write has waited
// for the stream write timeout: the daemon's request ends (it is counted in
// /metrics) and the command in the sandbox is killed, while the client
// still holds its connection open.
func TestExecStreamClientStopsReading(t *testing.T) {
	t.Parallel()
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--stream-write-timeout", "2s"}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	const route = `route="/v1/sandboxes/{id}/exec"`
	before := requestCount(t, d, route)

	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive buffer fills sooner; nothing is ever read from it.
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"command":"echo $$ > /tmp/flood.pid; exec yes flood","timeoutMs":3600000}`
	fmt.Fprintf(conn, "POST /v1/sandboxes/%s/exec?stream=true HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", sb.ID, d.Addr, strings.TrimSpace(string(tok)), len(body), body)

	pid := ""
	poll(t, "the command to write its pid", func() bool {
		rc, err := d.C.ReadFile(ctx, sb.ID, "/tmp/flood.pid", nil)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		pid = strings.TrimSpace(string(b))
		return pid != ""
	})
	poll(t, "the daemon to end the stalled exec request", func() bool {
		return requestCount(t, d, route) > before
	})
	poll(t, "the command (pid "+pid+") to be killed", func() bool {
		_, err := d.C.Stat(ctx, sb.ID, "/proc/"+pid)
		return errors.Is(err, client.ErrNotFound)
	})
	// The sandbox serves the next exec as usual.
	mustOK(t, run(t, d, sb.ID, "true"), "exec after the dropped stream")
}

// requestCount sums hotcell_http_requests_total over the POSTs of a route.
func requestCount(t *testing.T, d *testdaemon.Daemon, route string) float64 {
	t.Helper()
	m, err := d.C.Metrics(t.Context())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	var n float64
	sc := bufio.NewScanner(strings.NewReader(m))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "hotcell_http_requests_total{") || !strings.Contains(line, route) || !strings.Contains(line, `method="POST"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// poll waits for cond; the limit only bounds a hang.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDownloadBrokenByAgentDeath: when the agent dies half-way through a
// large download, the client sees a failed transfer, never a clean end of
// a short body, for a file (Content-Length) and an archive (chunked) alike.
func TestDownloadBrokenByAgentDeath(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	const size = 64 << 20
	for _, tc := range []struct {
		name string
		open func(ctx context.Context, id string) (io.ReadCloser, error)
	}{
		{"file", func(ctx context.Context, id string) (io.ReadCloser, error) {
			return d.C.ReadFile(ctx, id, "/workspace/big", nil)
		}},
		{"archive", func(ctx context.Context, id string) (io.ReadCloser, error) {
			return d.C.GetArchive(ctx, id, "/workspace")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sb := newSandbox(t, d, client.CreateSandboxRequest{})
			mustOK(t, run(t, d, sb.ID, fmt.Sprintf("dd if=/dev/urandom of=/workspace/big bs=1M count=%d 2>/dev/null", size>>20)), "write a big file")
			rc, err := tc.open(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			// The transfer is under way; the rest waits on this reader.
			if _, err := io.ReadFull(rc, make([]byte, 1<<20)); err != nil {
				t.Fatalf("first MiB: %v", err)
			}
			// SIGKILL to the container's PID 1, the agent.
			docker(t, "kill", "hotcell-"+sb.ID)
			n, err := io.Copy(io.Discard, rc)
			if err == nil {
				t.Fatalf("read %d more bytes and a clean end after the agent was killed; want a broken transfer", n)
			}
			if n+1<<20 >= size {
				t.Errorf("read %d bytes in all, want fewer than the %d of the file", n+1<<20, size)
			}
			t.Logf("broken after %d bytes: %v", n+1<<20, err)
		})
	}
}
