// Package gatewaytest is a fake LLM upstream for the gateway's tests and
// benchmarks: it listens on loopback, speaks the OpenAI-style (chat
// completions) and Anthropic-style (messages) shapes, JSON and SSE, with
// their usage fields and errors, and records what it received.
package gatewaytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Keys the fake upstream accepts. They stand for real provider keys: the
// gateway's tests check that these reach the upstream and never a sandbox.
const (
	OpenAIKey    = "sk-fake-openai-KEY-7f3a9c1e5b"
	AnthropicKey = "sk-ant-fake-KEY-2d8e4b6a0c"
)

// Usage the fake upstream reports.
const (
	OpenAIPrompt, OpenAICompletion = 11, 7
	AnthropicInput, AnthropicOut   = 25, 15
	// StreamChunks is how many content events a streamed answer has
	// before its last one.
	StreamChunks = 3
)

// NoUsageModel is a model whose OpenAI-style answers never report their
// usage, like an upstream that ignores stream_options. It still bills.
const NoUsageModel = "no-usage"

// Request is what the upstream received.
type Request struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// Upstream is the fake upstream.
type Upstream struct {
	*httptest.Server

	mu        sync.Mutex
	reqs      []Request
	openaiKey string        // the key the OpenAI routes accept
	billed    int64         // tokens of every answer given, reported or not
	hold      chan struct{} // when set, streams wait on it before their last event
	held      chan struct{} // signalled when a stream waits on hold
	canceled  chan struct{} // /wait-cancel: closed when the client went away
}

// New starts a fake upstream on loopback; t.Cleanup closes it.
func New(t interface{ Cleanup(func()) }) *Upstream {
	u := &Upstream{held: make(chan struct{}, 16), canceled: make(chan struct{}, 16), openaiKey: OpenAIKey}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", u.openai)
	mux.HandleFunc("POST /v1/messages", u.anthropic)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{}})
	})
	mux.HandleFunc("/v1/error/{status}", func(w http.ResponseWriter, r *http.Request) {
		st, _ := strconv.Atoi(r.PathValue("status"))
		writeJSON(w, st, map[string]any{"error": map[string]any{"message": "fake upstream error", "type": "server_error"}})
	})
	mux.HandleFunc("/v1/wait-cancel", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		u.canceled <- struct{}{}
	})
	mux.HandleFunc("/v1/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, map[string]any{"error": map[string]any{"message": "fake upstream: no route " + r.URL.Path}})
	})
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		u.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// Requests returns what the upstream received so far.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.reqs...)
}

// Last returns the last request received.
func (u *Upstream) Last() (Request, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		return Request{}, false
	}
	return u.reqs[len(u.reqs)-1], true
}

// Hold makes streams stop before their last event until release is
// called; held receives once per stream that reached that point.
func (u *Upstream) Hold() (held <-chan struct{}, release func()) {
	ch := make(chan struct{})
	u.mu.Lock()
	u.hold = ch
	u.mu.Unlock()
	var once sync.Once
	return u.held, func() { once.Do(func() { close(ch) }) }
}

// SetOpenAIKey makes the OpenAI routes accept key instead of OpenAIKey,
// as an upstream does after its key was rotated.
func (u *Upstream) SetOpenAIKey(key string) {
	u.mu.Lock()
	u.openaiKey = key
	u.mu.Unlock()
}

// Billed is the total of the tokens of every answer the upstream began
// (prompt and completion), whether or not the answer reported them: what
// a real provider would bill the key for.
func (u *Upstream) Billed() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.billed
}

func (u *Upstream) bill(n int64) {
	u.mu.Lock()
	u.billed += n
	u.mu.Unlock()
}

// Canceled receives when a /v1/wait-cancel request's client went away.
func (u *Upstream) Canceled() <-chan struct{} { return u.canceled }

func (u *Upstream) waitHold() {
	u.mu.Lock()
	h := u.hold
	u.mu.Unlock()
	if h != nil {
		u.held <- struct{}{}
		<-h
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type chatRequest struct {
	Model string `json:"model"`
	// MaxTokens, when set, is what the answer's completion uses: a model
	// that always writes up to its limit.
	MaxTokens     int64 `json:"max_tokens"`
	Stream        bool  `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (u *Upstream) openai(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	key := u.openaiKey
	u.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+key {
		writeJSON(w, 401, map[string]any{"error": map[string]any{"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}})
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "bad json: " + err.Error()}})
		return
	}
	completion := int64(OpenAICompletion)
	if req.MaxTokens > 0 {
		completion = req.MaxTokens
	}
	u.bill(OpenAIPrompt + completion)
	usage := map[string]any{"prompt_tokens": OpenAIPrompt, "completion_tokens": completion, "total_tokens": OpenAIPrompt + completion}
	if !req.Stream {
		doc := map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "hello from the fake upstream"}, "finish_reason": "stop"}},
			"usage":   usage,
		}
		if req.Model == NoUsageModel {
			delete(doc, "usage")
		}
		writeJSON(w, 200, doc)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk := func(content string) map[string]any {
		return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}}}, "usage": nil}
	}
	for i := range StreamChunks {
		send(chunk(fmt.Sprintf("part%d ", i)))
	}
	u.waitHold()
	last := chunk("last")
	last["choices"].([]any)[0].(map[string]any)["finish_reason"] = "stop"
	send(last)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage && req.Model != NoUsageModel {
		send(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (u *Upstream) anthropic(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Api-Key") != AnthropicKey {
		writeJSON(w, 401, map[string]any{"type": "error", "error": map[string]any{"type": "authentication_error", "message": "invalid x-api-key"}})
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": err.Error()}})
		return
	}
	completion := int64(AnthropicOut)
	if req.MaxTokens > 0 {
		completion = req.MaxTokens
	}
	u.bill(AnthropicInput + completion)
	if !req.Stream {
		writeJSON(w, 200, map[string]any{
			"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "text", "text": "hello from the fake upstream"}},
			"stop_reason": "end_turn",
			"usage":       map[string]any{"input_tokens": AnthropicInput, "output_tokens": completion},
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	send := func(ev string, v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev, b)
		w.(http.Flusher).Flush()
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "content": []any{},
		"usage": map[string]any{"input_tokens": AnthropicInput, "output_tokens": 1}}})
	for i := range StreamChunks {
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": fmt.Sprintf("part%d ", i)}})
	}
	u.waitHold()
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"},
		"usage": map[string]any{"output_tokens": completion}})
	send("message_stop", map[string]any{"type": "message_stop"})
}
