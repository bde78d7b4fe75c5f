package inflight

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

func TestShutdownOrder(t *testing.T) {
	t.Parallel()
	g := New()
	reqCtx, reqCancel := context.WithCancel(t.Context())
	bctx, endB, err := g.Begin(reqCtx)
	if err != nil {
		t.Fatal(err)
	}
	dctx, endD, err := g.Detach(reqCtx)
	if err != nil {
		t.Fatal(err)
	}
	reqCancel()
	if bctx.Err() == nil {
		t.Error("Begin: the request's end did not end the operation's context")
	}
	if dctx.Err() != nil {
		t.Errorf("Detach: the request's end ended the detached context: %v", dctx.Err())
	}
	endB()
	endB() // a second end is harmless

	g.Close()
	if _, _, err := g.Begin(t.Context()); !errors.Is(err, ErrShuttingDown) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Begin after Close: got %v, want ErrShuttingDown (unavailable)", err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if n := g.Wait(short); n != 1 {
		t.Errorf("Wait with one operation running: got %d left, want 1", n)
	}
	g.Cancel()
	<-dctx.Done()
	if cause := context.Cause(dctx); !errors.Is(cause, ErrShuttingDown) {
		t.Errorf("cause after Cancel: got %v, want ErrShuttingDown", cause)
	}
	done := make(chan int)
	go func() { done <- g.Wait(t.Context()) }()
	endD()
	if n := <-done; n != 0 {
		t.Errorf("Wait after the last end: got %d left, want 0", n)
	}
}

func TestHandlerRefusesAfterClose(t *testing.T) {
	t.Parallel()
	g := New()
	var sawCancel bool
	h := g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Cancel()
		<-r.Context().Done()
		sawCancel = true
		w.WriteHeader(http.StatusNoContent)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if !sawCancel || rec.Code != http.StatusNoContent {
		t.Errorf("request during the group's cancel: code %d, saw cancel %v", rec.Code, sawCancel)
	}
	g.Close()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("request after Close: got %d, want 503", rec.Code)
	}
}
