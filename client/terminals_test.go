package client

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestTermBuffer(t *testing.T) {
	t.Parallel()
	b := newTermBuffer()
	big := bytes.Repeat([]byte("x"), terminalBuffer)
	b.write(big)
	wrote := make(chan struct{})
	go func() {
		b.write([]byte("tail")) // waits for room: backpressure, not growth
		b.finish(nil)
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("a write into a full buffer did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	got, err := io.ReadAll(b)
	<-wrote
	if err != nil || len(got) != terminalBuffer+4 || !bytes.HasSuffix(got, []byte("tail")) {
		t.Errorf("read %d bytes, err %v; want all %d and EOF", len(got), err, terminalBuffer+4)
	}

	b = newTermBuffer()
	b.write([]byte("a"))
	boom := errors.New("boom")
	b.finish(boom)
	p := make([]byte, 8)
	if n, err := b.Read(p); n != 1 || err != nil {
		t.Errorf("first read %d %v, want the byte", n, err)
	}
	if _, err := b.Read(p); !errors.Is(err, boom) {
		t.Errorf("read after finish: %v, want boom", err)
	}

	b = newTermBuffer()
	b.write(big)
	b.abandon()
	b.write([]byte("dropped")) // must not block once nobody reads
	if _, err := b.Read(p); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after abandon: %v, want net.ErrClosed", err)
	}
}
