package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
)

// procRPC makes a unary call of envd's process service.
func (c *envdClient) procRPC(method, id, token string, in any) (int, []byte) {
	c.t.Helper()
	b, _ := json.Marshal(in)
	return c.do("POST", "/process.Process/"+method, id, token, "application/json", bytes.NewReader(b))
}

// procStart calls Start with req and returns the pid of its start event
// (0 if the stream did not start) and the first message's JSON, closing
// the stream after it: the process goes on, as a background command does.
func (c *envdClient) procStart(id, token string, req any) (int, string) {
	c.t.Helper()
	hreq, err := http.NewRequestWithContext(c.t.Context(), "POST", c.base+"/process.Process/Start", bytes.NewReader(envelope(req)))
	if err != nil {
		c.t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("Connect-Protocol-Version", "1")
	hreq.Header.Set("E2b-Sandbox-Id", id)
	if token != "" {
		hreq.Header.Set("X-Access-Token", token)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		c.t.Fatalf("Start: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return 0, string(b)
	}
	br := bufio.NewReader(resp.Body)
	var hdr [5]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		c.t.Fatalf("Start: read envelope: %v", err)
	}
	msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(br, msg); err != nil {
		c.t.Fatalf("Start: read message: %v", err)
	}
	var ev struct {
		Event struct {
			Start *struct {
				PID int `json:"pid"`
			} `json:"start"`
		} `json:"event"`
	}
	if hdr[0] == 0 && json.Unmarshal(msg, &ev) == nil && ev.Event.Start != nil {
		return ev.Event.Start.PID, string(msg)
	}
	return 0, string(msg)
}

// TestHostileE2BProcesses attacks envd's process service of one sandbox
// from another: with its own envd token, and with none, it lists the
// victim's processes, kills, feeds, resizes and closes the stdin of the
// victim's background command, reattaches to it and starts its own
// command there. Every call is refused as unauthenticated, and the
// victim's command still runs and takes input afterwards. Then it floods
// its own sandbox with background commands: past the agent's bound they are
// refused, and the daemon and the victim still serve.
func TestHostileE2BProcesses(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	c := newEnvdClient(t, d)
	victim := newSandbox(t, d, client.CreateSandboxRequest{})
	attacker := newSandbox(t, d, client.CreateSandboxRequest{})
	vTok, aTok := c.srv.EnvdToken(victim.ID), c.srv.EnvdToken(attacker.ID)

	cat := map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "cat > /tmp/fed"}}, "stdin": true}
	pid, first := c.procStart(victim.ID, vTok, cat)
	if pid == 0 {
		t.Fatalf("the victim's Start: first message %s, want a start event", first)
	}
	sel := map[string]any{"pid": pid}
	attacks := []struct {
		method string
		in     any
	}{
		{"List", map[string]any{}},
		{"SendSignal", map[string]any{"process": sel, "signal": "SIGNAL_SIGKILL"}},
		{"SendInput", map[string]any{"process": sel, "input": map[string]any{"stdin": "aW5qZWN0ZWQK"}}},
		{"CloseStdin", map[string]any{"process": sel}},
		{"Update", map[string]any{"process": sel, "pty": map[string]any{"size": map[string]any{"cols": 10, "rows": 10}}}},
	}
	for _, tok := range []string{aTok, ""} {
		for _, a := range attacks {
			if status, body := c.procRPC(a.method, victim.ID, tok, a.in); status != http.StatusUnauthorized || !strings.Contains(string(body), "unauthenticated") {
				t.Errorf("%s on the victim with token %q: status %d %s, want 401 unauthenticated", a.method, tok, status, body)
			}
		}
		for _, call := range []string{"Start", "Connect"} {
			var in any = cat
			if call == "Connect" {
				in = map[string]any{"process": sel}
			}
			b, _ := json.Marshal(in)
			_ = b
			got, msg := 0, ""
			if call == "Start" {
				got, msg = c.procStart(victim.ID, tok, in)
			} else {
				status, body := c.do("POST", "/process.Process/Connect", victim.ID, tok, "application/connect+json", bytes.NewReader(envelope(in)))
				msg = string(body)
				if status != http.StatusUnauthorized {
					t.Errorf("Connect with token %q: status %d", tok, status)
				}
			}
			if got != 0 || !strings.Contains(msg, "unauthenticated") {
				t.Errorf("%s on the victim with token %q: pid %d, %s; want unauthenticated", call, tok, got, msg)
			}
		}
	}

	// The victim's command still runs, unfed, and takes its owner's input.
	status, body := c.procRPC("List", victim.ID, vTok, map[string]any{})
	if status != http.StatusOK || !strings.Contains(string(body), `"pid":`+itoaE(pid)) {
		t.Fatalf("the victim's List: %d %s, want its pid %d", status, body, pid)
	}
	if status, body := c.procRPC("SendInput", victim.ID, vTok, map[string]any{"process": sel, "input": map[string]any{"stdin": "b3duZXIK"}}); status != http.StatusOK {
		t.Fatalf("the victim's SendInput: %d %s", status, body)
	}
	if status, body := c.procRPC("CloseStdin", victim.ID, vTok, map[string]any{"process": sel}); status != http.StatusOK {
		t.Fatalf("the victim's CloseStdin: %d %s", status, body)
	}
	poll(t, "the victim's command to write what its owner fed it", func() bool {
		res, err := d.C.Exec(t.Context(), victim.ID, client.ExecRequest{Command: "cat /tmp/fed"})
		return err == nil && res.Stdout == "owner\n"
	})

	// A flood of background commands in the attacker's own sandbox is
	// bounded by the agent; the daemon and the victim go on.
	sleep := map[string]any{"process": map[string]any{"cmd": "sleep", "args": []string{"600"}}}
	started, refused := 0, ""
	for range 80 {
		if p, msg := c.procStart(attacker.ID, aTok, sleep); p != 0 {
			started++
		} else {
			refused = msg
			break
		}
	}
	if refused == "" || !strings.Contains(refused, "failed_precondition") {
		t.Errorf("after %d background commands: refusal %q, want failed_precondition", started, refused)
	}
	if p, msg := c.procStart(victim.ID, vTok, map[string]any{"process": map[string]any{"cmd": "true"}}); p == 0 {
		t.Errorf("the victim's Start after the flood: %s", msg)
	}
	if _, err := d.C.Exec(t.Context(), attacker.ID, client.ExecRequest{Command: "true"}); err != nil {
		t.Errorf("hotcell exec in the flooded sandbox: %v", err)
	}
}

func itoaE(n int) string { b, _ := json.Marshal(n); return string(b) }
