package ndjson

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

type event struct {
	Type string `json:"type"`
	N    int    `json:"n,omitempty"`
}

// lines reads every line of resp's body as {type, error.code}.
func lines(t *testing.T, body io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		var ev struct {
			Type  string          `json:"type"`
			Error *errdefs.Detail `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if ev.Error != nil {
			out = append(out, ev.Type+":"+ev.Error.Code)
		} else {
			out = append(out, ev.Type)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return out
}

func get(t *testing.T, h http.HandlerFunc) (*http.Response, []string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, lines(t, resp.Body)
}

func TestHeadersAndTerminalLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(s *Writer) error
		want    []string
	}{
		{"end", func(s *Writer) error {
			if err := s.Send(event{Type: "a"}); err != nil {
				return err
			}
			return s.End(event{Type: "done"})
		}, []string{"a", "done"}},
		{"fail", func(s *Writer) error {
			return s.Fail(fmt.Errorf("sandbox x: %w", errdefs.ErrNotFound))
		}, []string{"stream.error:not_found"}},
		{"nothing after the end", func(s *Writer) error {
			if err := s.End(event{Type: "done"}); err != nil {
				return err
			}
			if err := s.Send(event{Type: "late"}); !errors.Is(err, ErrEnded) {
				return fmt.Errorf("send after end: got %v, want ErrEnded", err)
			}
			if err := s.End(event{Type: "again"}); !errors.Is(err, ErrEnded) {
				return fmt.Errorf("end after end: got %v, want ErrEnded", err)
			}
			if err := s.Fail(errors.New("late")); !errors.Is(err, ErrEnded) {
				return fmt.Errorf("fail after end: got %v, want ErrEnded", err)
			}
			return nil
		}, []string{"done"}},
		{"handler forgot the end", func(s *Writer) error {
			return s.Send(event{Type: "a"})
		}, []string{"a", "stream.error:internal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errc := make(chan error, 1)
			resp, got := get(t, func(w http.ResponseWriter, r *http.Request) {
				s := Start(w, r, Options{Status: http.StatusCreated, RequestID: "rid"})
				defer s.Close()
				errc <- tt.handler(s)
			})
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("status: got %d, want 201", resp.StatusCode)
			}
			for h, want := range map[string]string{"Content-Type": "application/x-ndjson", "Cache-Control": "no-store"} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s: got %q, want %q", h, got, want)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("lines (-want +got):\n%s", d)
			}
		})
	}
}

func TestFailCarriesTheErrorDetail(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := Start(w, r, Options{RequestID: "r1"})
		defer s.Close()
		_ = s.Fail(errors.New("disk on fire"))
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got wire.StreamError
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	// The same detail errdefs.Write would have answered with.
	rec := httptest.NewRecorder()
	errdefs.Write(rec, errors.New("disk on fire"), "r1")
	var want errdefs.Body
	if err := json.NewDecoder(rec.Body).Decode(&want); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wire.StreamError{Type: wire.EventStreamError, Error: want.Error}, got); d != "" {
		t.Errorf("failure line (-want +got):\n%s", d)
	}
}

func TestKeepalivesWhileQuiet(t *testing.T) {
	t.Parallel()
	const want = 3
	seen := make(chan struct{}, want)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := Start(w, r, Options{Keepalive: 10 * time.Millisecond, KeepaliveEvent: func() any { return event{Type: "keepalive"} }})
		defer s.Close()
		// Quiet until the client has read want keepalives.
		for range want {
			select {
			case <-seen:
			case <-r.Context().Done():
				return
			}
		}
		_ = s.End(event{Type: "done"})
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type)
		if ev.Type == "keepalive" {
			seen <- struct{}{}
		}
	}
	if d := cmp.Diff([]string{"keepalive", "keepalive", "keepalive", "done"}, got); d != "" {
		t.Errorf("lines (-want +got):\n%s", d)
	}
}

// TestStalledReaderEndsTheStream: a client that stops reading makes a write
// run past its deadline; Send then fails, the stream's context ends, and
// the handler is free to return.
func TestStalledReaderEndsTheStream(t *testing.T) {
	t.Parallel()
	result := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := Start(w, r, Options{WriteTimeout: 50 * time.Millisecond})
		defer s.Close()
		line := event{Type: strings.Repeat("x", 64<<10)}
		for {
			if err := s.Send(line); err != nil {
				<-s.Context().Done() // work feeding the stream stops too
				result <- err
				return
			}
		}
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Ask, then never read a byte of the answer.
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	err = <-result
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("send to a stalled reader: got %v, want a write timeout", err)
	}
}

// TestClientGone: a client that hangs up ends the stream's context, and
// nothing is written after (Close adds no failure line, End fails).
func TestClientGone(t *testing.T) {
	t.Parallel()
	closed := make(chan error, 1)
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := Start(w, r, Options{Keepalive: 5 * time.Millisecond, KeepaliveEvent: func() any { return event{Type: "keepalive"} }})
		close(started)
		<-s.Context().Done()
		s.Close()
		closed <- s.End(event{Type: "done"})
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	if err := <-closed; err == nil {
		t.Errorf("end after the client left: got nil, want an error")
	}
}
