package e2b

// The Connect protocol (https://connectrpc.com/docs/protocol), JSON codec
// only, as far as envd's clients use it (e2b-protocol.md §3):
//
//   - unary: POST application/json, the message as the body; success is a
//     200 with the answer as JSON; an error is a non-200 with
//     {"code":"not_found","message":"..."}.
//   - server streaming: POST application/connect+json with one enveloped
//     message; the answer is a 200 application/connect+json of enveloped
//     messages that always ends with an end-stream envelope (flag 0x02)
//     holding {} or {"error":{...}}. Errors, even ones found before the
//     first message, travel in the end-stream envelope.
//
// An envelope is a flag byte (0x00 message, 0x01 compressed, 0x02
// end-stream), a 4-byte big-endian length and the JSON.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

const (
	flagMessage    = 0x00
	flagCompressed = 0x01
	flagEndStream  = 0x02

	// maxMessage bounds a request message (SendInput carries stdin).
	maxMessage = 8 << 20
	// streamWriteTimeout bounds each write of a stream: a client that stops
	// reading for this long loses it.
	streamWriteTimeout = 30 * time.Second
	// defaultKeepalive is how long a stream may stay quiet before a
	// keepalive message when the client names no interval.
	defaultKeepalive = 50 * time.Second
)

// connectError is the JSON error of the Connect protocol.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// connectCode maps an error to its Connect code and the HTTP status a unary
// call answers with.
func connectCode(err error) (status int, code string) {
	switch {
	case errors.Is(err, context.Canceled):
		return 499, "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errdefs.ErrDeadlineExceeded):
		return http.StatusGatewayTimeout, "deadline_exceeded"
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return http.StatusBadRequest, "invalid_argument"
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return http.StatusConflict, "already_exists"
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusPreconditionFailed, "failed_precondition"
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return http.StatusUnauthorized, "unauthenticated"
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return http.StatusForbidden, "permission_denied"
	case errors.Is(err, errdefs.ErrTooLarge), errors.Is(err, errdefs.ErrInsufficientStorage):
		return http.StatusTooManyRequests, "resource_exhausted"
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, errdefs.ErrNotImplemented):
		return http.StatusNotImplemented, "unimplemented"
	}
	return http.StatusInternalServerError, "internal"
}

func toConnectError(err error) connectError {
	_, code := connectCode(err)
	return connectError{Code: code, Message: err.Error()}
}

// writeConnectError answers a unary call (or a request refused before any
// handler ran) with a Connect error.
func writeConnectError(w http.ResponseWriter, err error) {
	status, _ := connectCode(err)
	writeJSON(w, status, toConnectError(err))
}

func mediaType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// unary adapts fn to a Connect unary call with the JSON codec. Unknown
// fields in the request are ignored, as proto3 JSON parsers do.
func unary[Req, Resp any](fn func(r *http.Request, req *Req) (*Resp, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if mt := mediaType(r); mt != "application/json" {
			return fmt.Errorf("content type %q: unary calls take application/json (the Connect protocol's JSON codec): %w", mt, errdefs.ErrInvalidArgument)
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessage))
		if err != nil {
			return fmt.Errorf("read request: %w", errors.Join(errdefs.ErrInvalidArgument, err))
		}
		req := new(Req)
		if len(body) > 0 {
			if err := json.Unmarshal(body, req); err != nil {
				return errdefs.Invalid("body", "invalid JSON: %v", err)
			}
		}
		resp, err := fn(r, req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, resp)
		return nil
	}
}

// serverStream adapts fn to a Connect server-streaming call with the JSON
// codec. fn sends messages on the Stream; what it returns ends the stream
// (nil as {}, an error as the end-stream error). The HTTP status is 200
// either way, as the protocol wants.
func serverStream[Req any](fn func(r *http.Request, req *Req, st *Stream) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		st := &Stream{w: w, rc: http.NewResponseController(w), last: time.Now()}
		req := new(Req)
		err := readStreamRequest(r, req)
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(http.StatusOK)
		if err == nil {
			err = fn(r, req, st)
		}
		st.end(err)
		return nil
	}
}

func readStreamRequest(r *http.Request, v any) error {
	if mt := mediaType(r); mt != "application/connect+json" {
		return fmt.Errorf("content type %q: streaming calls take application/connect+json: %w", mt, errdefs.ErrInvalidArgument)
	}
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		return fmt.Errorf("Connect-Content-Encoding %q: only identity is supported: %w", enc, errdefs.ErrNotImplemented)
	}
	flag, msg, err := readEnvelope(io.LimitReader(r.Body, maxMessage+5))
	if err != nil {
		return fmt.Errorf("read request envelope: %w", errors.Join(errdefs.ErrInvalidArgument, err))
	}
	if flag != flagMessage {
		return fmt.Errorf("request envelope flag %#x: only uncompressed messages are supported: %w", flag, errdefs.ErrInvalidArgument)
	}
	if err := json.Unmarshal(msg, v); err != nil {
		return errdefs.Invalid("body", "invalid JSON: %v", err)
	}
	return nil
}

// readEnvelope reads one envelope.
func readEnvelope(r io.Reader) (flag byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return 0, nil, fmt.Errorf("message of %d bytes is larger than %d", n, maxMessage)
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, fmt.Errorf("short message: %w", err)
	}
	return hdr[0], msg, nil
}

func appendEnvelope(b []byte, flag byte, msg []byte) []byte {
	b = append(b, flag, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(msg)))
	return append(b, msg...)
}

// Stream is the answer of a server-streaming call. Send is safe to call
// from several goroutines.
type Stream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	mu   sync.Mutex
	last time.Time // of the last message written
	done bool      // the end-stream envelope was written
}

// errStreamEnded is returned by Send after the stream ended.
var errStreamEnded = errors.New("stream ended")

// Send writes one message and flushes it to the client.
func (st *Stream) Send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode stream message: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return errStreamEnded
	}
	return st.write(appendEnvelope(nil, flagMessage, b))
}

// write writes and flushes an envelope; st.mu is held.
func (st *Stream) write(b []byte) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := st.w.Write(b); err != nil {
		return err
	}
	st.last = time.Now()
	return st.rc.Flush()
}

// end writes the end-stream envelope; later Sends fail.
func (st *Stream) end(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.done = true
	var end struct {
		Error *connectError `json:"error,omitempty"`
	}
	if err != nil {
		ce := toConnectError(err)
		end.Error = &ce
	}
	b, _ := json.Marshal(end)
	_ = st.write(appendEnvelope(nil, flagEndStream, b))
}

// Keepalive sends msg whenever the stream has been quiet for every, until
// ctx ends or the stream does. Proxies cut idle streams; the SDK ignores
// keepalive messages.
func (st *Stream) Keepalive(ctx context.Context, every time.Duration, msg any) {
	go func() {
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			st.mu.Lock()
			idle := time.Since(st.last)
			done := st.done
			st.mu.Unlock()
			if done {
				return
			}
			if idle >= every {
				if err := st.Send(msg); err != nil {
					return
				}
				idle = 0
			}
			t.Reset(every - idle)
		}
	}()
}

// KeepaliveInterval is how often a stream of r should send keepalives: the
// client's Keepalive-Ping-Interval (seconds), bounded to [1 s, 90 s], or
// 50 s.
func KeepaliveInterval(r *http.Request) time.Duration {
	s, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval"))
	if err != nil || s <= 0 {
		return defaultKeepalive
	}
	return min(max(time.Duration(s)*time.Second, time.Second), 90*time.Second)
}

// ConnectTimeout is the call's Connect-Timeout-Ms, if it sent one. envd
// treats it as the lifetime of a process started by Start (e2b-protocol.md
// §3 "Timeouts"); other calls may bound their work by it.
func ConnectTimeout(r *http.Request) (time.Duration, bool) {
	ms, err := strconv.ParseInt(r.Header.Get("Connect-Timeout-Ms"), 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
