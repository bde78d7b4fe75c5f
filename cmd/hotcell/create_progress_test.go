package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// progressDaemon answers a create with progress=true with lines, and a
// plain create with 201, recording which one it was asked for.
func progressDaemon(t *testing.T, lines ...string) (url string, asked *[]string) {
	t.Helper()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.RequestURI())
		if r.URL.Query().Get("progress") != "true" {
			jsonReply(w, 201, map[string]string{"id": "sb1", "state": "running"})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n")
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &got
}

func TestCreateProgress(t *testing.T) {
	url, asked := progressDaemon(t,
		`{"type":"progress","message":"pulling img: done"}`,
		`{"type":"keepalive"}`,
		`{"type":"progress","message":"setup: make"}`,
		`{"type":"sandbox","sandbox":{"id":"sb1","state":"running"}}`)
	res := runCLI(t, envFor(url), "create", "--progress", "--image", "img")
	if res.code != 0 || res.stdout != "sb1\n" {
		t.Fatalf("got %+v, want exit 0 and the id alone on stdout", res)
	}
	if want := "pulling img: done\nsetup: make\n"; res.stderr != want {
		t.Errorf("stderr %q, want %q", res.stderr, want)
	}

	// Without --progress and with stderr not a terminal: the plain create.
	res = runCLI(t, envFor(url), "create", "--image", "img")
	if res.code != 0 || res.stdout != "sb1\n" || res.stderr != "" {
		t.Errorf("got %+v, want the id and nothing on stderr", res)
	}
	if want := []string{"/v1/sandboxes?progress=true", "/v1/sandboxes"}; strings.Join(*asked, " ") != strings.Join(want, " ") {
		t.Errorf("requests %q, want %q", *asked, want)
	}
}

func TestCreateProgressError(t *testing.T) {
	url, _ := progressDaemon(t,
		`{"type":"progress","message":"pulling nope"}`,
		`{"type":"stream.error","error":{"code":"not_found","message":"image nope is not on this host; build it with make image"}}`)
	res := runCLI(t, envFor(url), "create", "--progress", "--image", "nope")
	if res.code == 0 || res.stdout != "" {
		t.Fatalf("got %+v, want a failure and nothing on stdout", res)
	}
	if !strings.Contains(res.stderr, "pulling nope\n") || !strings.Contains(res.stderr, "build it with make image") {
		t.Errorf("stderr %q, want the progress line and the error", res.stderr)
	}
}
