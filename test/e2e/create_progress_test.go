package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
)

// TestCreateProgress creates with a clone and two setup commands over the
// progress stream: the lines name the clone and each command in order, and
// the stream ends with the running sandbox.
func TestCreateProgress(t *testing.T) {
	d := sharedDaemon(t)
	repo := makeRepo(t)
	req := client.CreateSandboxRequest{
		Labels: map[string]string{"test": sanitizeLabel(t.Name())},
		Repo:   &client.Repo{URL: repo, Ref: "v1"},
		Setup:  []string{"cat README.md", "echo second > done.txt"},
	}
	var msgs []string
	sb, err := d.C.CreateSandboxProgress(t.Context(), req, func(m string) { msgs = append(msgs, m) })
	if err != nil {
		t.Fatalf("create with progress: %v\n%s", err, d.Logs())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Errorf("destroy %s: %v", sb.ID, err)
		}
	})
	t.Logf("progress: %q", msgs)
	if sb.State != client.StateRunning || len(sb.Setup) != 2 {
		t.Errorf("final sandbox: state %s, setup %+v; want running with 2 setup results", sb.State, sb.Setup)
	}
	want := []string{"cloning " + repo, "setup: cat README.md", "setup: echo second > done.txt"}
	// Image lines may come first (a pull); what matters is these, in order.
	i := slices.Index(msgs, want[0])
	if i < 0 || !slices.Equal(msgs[i:], want) {
		t.Errorf("progress messages %q, want them to end with %q", msgs, want)
	}
	if out := mustOK(t, run(t, d, sb.ID, "cat done.txt"), "read setup output"); out != "second\n" {
		t.Errorf("done.txt = %q, want the second setup command to have run", out)
	}
}

// TestCreateProgressMissingImage: a create that fails after the 200 ends
// its stream with an error line that carries the plain create's code and
// says how to get the image.
func TestCreateProgressMissingImage(t *testing.T) {
	d := sharedDaemon(t)
	// A registry on a closed loopback port: the pull fails without leaving
	// the host.
	const image = "127.0.0.1:1/hotcell-does-not-exist:latest"
	_, err := d.C.CreateSandboxProgress(t.Context(), client.CreateSandboxRequest{Image: image}, func(string) {})
	t.Logf("create error: %v", err)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("create with a missing image: got %v, want an *APIError from the error line", err)
	}
	if apiErr.Code != "not_found" || !errors.Is(err, client.ErrNotFound) {
		t.Errorf("code %q (%v), want not_found", apiErr.Code, err)
	}
	if !strings.Contains(apiErr.Message, "build it with") {
		t.Errorf("message %q, want it to say how to build the image", apiErr.Message)
	}
}

// TestCreateProgressHangUp: a client that hangs up on the stream during
// setup does not cancel the create; the sandbox still comes up.
func TestCreateProgressHangUp(t *testing.T) {
	d := sharedDaemon(t)
	label := sanitizeLabel(t.Name())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := d.C.CreateSandboxProgress(ctx, client.CreateSandboxRequest{
		Labels: map[string]string{"test": label},
		Setup:  []string{"sleep 2"},
	}, func(m string) {
		if strings.HasPrefix(m, "setup: ") {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("create after hanging up: got %v, want context.Canceled", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := d.C.ListSandboxes(t.Context(), client.ListOptions{Labels: map[string]string{"test": label}})
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 1 && l[0].State == client.StateRunning {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := d.C.DeleteSandbox(ctx, l[0].ID); err != nil {
					t.Errorf("destroy %s: %v", l[0].ID, err)
				}
			})
			if len(l[0].Setup) != 1 || l[0].Setup[0].ExitCode != 0 {
				t.Errorf("setup after the hang-up: %+v, want sleep 2 to have run", l[0].Setup)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running sandbox a minute after the client hung up: %+v\n%s", l, d.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
