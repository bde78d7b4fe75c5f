package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// Bounds of what the usage parser holds: the tail of a JSON answer and one
// SSE event. Bigger ones pass through unparsed (the usage is then missed,
// never the bytes).
const (
	maxJSONTail = 256 << 10
	maxSSEEvent = 1 << 20
)

// usage is one answer's token usage.
type usage struct{ input, output, total int64 }

// usageJSON holds the usage fields of the OpenAI (chat and responses) and
// Anthropic shapes; a nil field was not reported.
type usageJSON struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
	CacheCreation    *int64 `json:"cache_creation_input_tokens"`
	CacheRead        *int64 `json:"cache_read_input_tokens"`
}

// usageParser reads the token usage from an answer's bytes as they pass:
// a JSON answer's top-level "usage", or, in an event stream, the usage of
// OpenAI's last chunk (stream_options.include_usage), of the Responses
// API's response.completed, or Anthropic's message_start and the
// cumulative message_delta. Later reports replace earlier ones field by
// field, which is what each of those streams means.
type usageParser struct {
	mode int // 0 unknown (ignored), 1 JSON, 2 SSE

	tail      []byte // JSON: the last maxJSONTail bytes
	truncated bool

	line  []byte // SSE: the current line
	skip  bool   // SSE: the current line is too long
	data  []byte // SSE: the current event's data
	input *int64
	out   *int64
	tot   *int64
}

const (
	modeNone = iota
	modeJSON
	modeSSE
)

func (u *usageParser) contentType(ct string) {
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "text/event-stream":
		u.mode = modeSSE
	case mt == "application/json" || len(mt) > 5 && mt[len(mt)-5:] == "+json":
		u.mode = modeJSON
	}
}

func (u *usageParser) write(p []byte) {
	switch u.mode {
	case modeJSON:
		u.tail = append(u.tail, p...)
		if over := len(u.tail) - maxJSONTail; over > 0 {
			u.truncated = true
			u.tail = append(u.tail[:0], u.tail[over:]...)
		}
	case modeSSE:
		for len(p) > 0 {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				u.addLine(p)
				return
			}
			u.addLine(p[:i])
			u.endLine()
			p = p[i+1:]
		}
	}
}

func (u *usageParser) addLine(p []byte) {
	if u.skip {
		return
	}
	if len(u.line)+len(p) > maxSSEEvent {
		u.skip, u.line = true, u.line[:0]
		return
	}
	u.line = append(u.line, p...)
}

func (u *usageParser) endLine() {
	line := bytes.TrimSuffix(u.line, []byte("\r"))
	skipped := u.skip
	u.line, u.skip = u.line[:0], false
	if skipped {
		u.data = u.data[:0]
		return
	}
	if len(line) == 0 {
		u.event()
		return
	}
	if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		v = bytes.TrimPrefix(v, []byte(" "))
		if len(u.data) > 0 {
			u.data = append(u.data, '\n')
		}
		if len(u.data)+len(v) <= maxSSEEvent {
			u.data = append(u.data, v...)
		}
	}
}

// event parses the data of one finished SSE event.
func (u *usageParser) event() {
	data := u.data
	u.data = u.data[:0]
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var ev struct {
		Usage    *usageJSON                  `json:"usage"`
		Message  *struct{ Usage *usageJSON } `json:"message"`
		Response *struct{ Usage *usageJSON } `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch {
	case ev.Usage != nil:
		u.merge(ev.Usage)
	case ev.Message != nil && ev.Message.Usage != nil:
		u.merge(ev.Message.Usage)
	case ev.Response != nil && ev.Response.Usage != nil:
		u.merge(ev.Response.Usage)
	}
}

func (u *usageParser) merge(j *usageJSON) {
	if in := sum(j.PromptTokens, j.InputTokens, j.CacheCreation, j.CacheRead); in != nil {
		u.input = in
	}
	if out := sum(j.CompletionTokens, j.OutputTokens); out != nil {
		u.out = out
	}
	if j.TotalTokens != nil {
		u.tot = j.TotalTokens
	}
}

// sum adds the reported fields; nil when none was reported.
func sum(vs ...*int64) *int64 {
	var s *int64
	for _, v := range vs {
		if v != nil {
			if s == nil {
				s = new(int64)
			}
			*s += max(*v, 0)
		}
	}
	return s
}

// reported says whether the answer carried any usage field.
func (u *usageParser) reported() bool { return u.input != nil || u.out != nil || u.tot != nil }

// result is the usage read so far; call it once the answer ended.
func (u *usageParser) result() usage {
	switch u.mode {
	case modeJSON:
		u.parseJSON()
	case modeSSE:
		if len(u.line) > 0 {
			u.endLine()
		}
		u.event()
	}
	var r usage
	if u.input != nil {
		r.input = *u.input
	}
	if u.out != nil {
		r.output = *u.out
	}
	r.total = r.input + r.output
	if u.tot != nil && *u.tot > 0 {
		r.total = *u.tot
	}
	return r
}

// parseJSON reads the usage of a JSON answer: the whole document when it
// fit in the tail, else the last "usage" object in the tail.
func (u *usageParser) parseJSON() {
	if !u.truncated {
		var doc struct {
			Usage *usageJSON `json:"usage"`
		}
		if json.Unmarshal(u.tail, &doc) == nil {
			if doc.Usage != nil {
				u.merge(doc.Usage)
			}
			return
		}
	}
	// A quote inside a JSON string is escaped, so `"usage"` followed by a
	// colon is a key.
	for i := bytes.LastIndex(u.tail, []byte(`"usage"`)); i >= 0; i = bytes.LastIndex(u.tail[:i], []byte(`"usage"`)) {
		rest := bytes.TrimLeft(u.tail[i+len(`"usage"`):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		var j usageJSON
		if json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&j) == nil {
			u.merge(&j)
			return
		}
	}
}

// counters are one sandbox's use of one provider, and its rate bucket.
type counters struct {
	mu sync.Mutex
	// c is the total as this daemon knows it: the store's total at the
	// last write (which has every daemon's counts added), and what this
	// daemon counted since.
	c store.GatewayCounters
	// stored is the store's total at the last write (or load): c - stored
	// is what this daemon counted and has not added to the store yet.
	stored store.GatewayCounters
	// reserved is what the calls in flight hold of the token budget.
	reserved int64
	// storedReserved is reserved as the store last recorded it for this
	// daemon (on a store the daemons of a set share).
	storedReserved int64
	bucket         float64
	filled         time.Time
}

// rejection says which budget refused a request.
type rejection struct {
	code, budget, message string
	limit, used           int64
	retryAfter            time.Duration
}

// admit decides whether one more request may go upstream and, if so,
// counts it and reserves reserve tokens of the token budget until settle.
// The token budget lets a call through while the used and reserved tokens
// are below it and the call's own reservation fits in what is left plus
// one default reservation (default_max_tokens): the calls let through can
// go over the budget by at most that much, whatever they do.
func (c *counters) admit(p *provider, now time.Time, reserve int64) *rejection {
	c.mu.Lock()
	defer c.mu.Unlock()
	rej, _ := c.decide(p, now, reserve, c.c, 0)
	return rej
}

// admitOn is admit on a set's counts (admitShared): total is the store's
// total, which has this daemon's counts up to at added, others the
// tokens the other daemons' calls in flight hold, and rate the rate
// bucket as the set's last admission left it. It returns what it
// counted, for the store, the tokens this daemon's calls hold now, and
// the bucket it leaves.
func (c *counters) admitOn(p *provider, now time.Time, reserve int64, total, at store.GatewayCounters, others int64, rate store.GatewayRate) (*rejection, store.GatewayCounters, int64, store.GatewayRate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// What was counted here since at (a call's end) is on top.
	used := addCounters(total, subCounters(c.c, at))
	c.bucket, c.filled = rate.Bucket, rate.Filled
	rej, add := c.decide(p, now, reserve, used, others)
	return rej, add, c.reserved, store.GatewayRate{Bucket: c.bucket, Filled: c.filled}
}

// decide is admit's decision on the counts used and the tokens others
// hold besides this daemon's calls, under c.mu: it counts the request or
// its refusal in c and returns that count.
func (c *counters) decide(p *provider, now time.Time, reserve int64, used store.GatewayCounters, others int64) (*rejection, store.GatewayCounters) {
	refused := store.GatewayCounters{Rejected: 1}
	if p.budgetRequests > 0 && used.Requests >= p.budgetRequests {
		c.c.Rejected++
		return &rejection{code: "budget_exceeded", budget: "requests", limit: p.budgetRequests, used: used.Requests,
			message: fmt.Sprintf("request budget of this sandbox for provider %s is used up: %d of %d requests", p.name, used.Requests, p.budgetRequests)}, refused
	}
	if p.budgetTokens > 0 {
		reserved := c.reserved + others
		held := used.TotalTokens + reserved
		if held >= p.budgetTokens {
			c.c.Rejected++
			msg := fmt.Sprintf("token budget of this sandbox for provider %s is used up: %d of %d tokens", p.name, used.TotalTokens, p.budgetTokens)
			if reserved > 0 {
				msg = fmt.Sprintf("token budget of this sandbox for provider %s is used up or held by requests in flight: %d of %d tokens used, %d reserved", p.name, used.TotalTokens, p.budgetTokens, reserved)
			}
			return &rejection{code: "budget_exceeded", budget: "tokens", limit: p.budgetTokens, used: used.TotalTokens, message: msg}, refused
		}
		if left := p.budgetTokens - held; reserve > left+p.defaultMax {
			c.c.Rejected++
			return &rejection{code: "budget_exceeded", budget: "tokens", limit: p.budgetTokens, used: used.TotalTokens,
				message: fmt.Sprintf("this request may use up to %d tokens (its input, estimated as body bytes / 4, and its max_tokens), more than the %d left of the token budget of this sandbox for provider %s: lower max_tokens", reserve, left, p.name)}, refused
		}
	}
	if p.rate > 0 {
		// A token bucket of rate requests per minute, holding at most a
		// minute's worth: bursts up to rate, then rate/60 per second.
		perSec := float64(p.rate) / 60
		if c.filled.IsZero() {
			c.bucket = float64(p.rate)
		} else {
			c.bucket = min(float64(p.rate), c.bucket+now.Sub(c.filled).Seconds()*perSec)
		}
		c.filled = now
		if c.bucket < 1 {
			c.c.Rejected++
			wait := time.Duration((1 - c.bucket) / perSec * float64(time.Second))
			return &rejection{code: "rate_limited", budget: "rate", limit: p.rate, used: int64(float64(p.rate) - c.bucket),
				message:    fmt.Sprintf("rate limit of this sandbox for provider %s: %d requests per minute; retry in %s", p.name, p.rate, wait.Round(time.Millisecond)),
				retryAfter: wait}, refused
		}
		c.bucket--
	}
	c.c.Requests++
	c.reserved += reserve
	return nil, store.GatewayCounters{Requests: 1}
}

// reservation returns the tokens the calls in flight hold, and whether
// the store records another number for this daemon.
func (c *counters) reservation() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reserved, c.reserved != c.storedReserved
}

// reservationWritten notes that the store records n for this daemon.
func (c *counters) reservationWritten(n int64) {
	c.mu.Lock()
	c.storedReserved = n
	c.mu.Unlock()
}

// reject counts a request refused before admit (concurrency cap).
func (c *counters) reject() {
	c.mu.Lock()
	c.c.Rejected++
	c.mu.Unlock()
}

// settle releases a finished request's reservation and adds its bytes
// and the usage it is charged.
func (c *counters) settle(reserve, in, out int64, u usage, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reserved -= reserve
	c.c.BytesIn += in
	c.c.BytesOut += out
	c.c.InputTokens += u.input
	c.c.OutputTokens += u.output
	c.c.TotalTokens += u.total
	if failed {
		c.c.Errors++
	}
}

// unwritten returns what this daemon counted and has not added to the
// store, and the counters as they are now (for written); ok is false
// when it counted nothing.
func (c *counters) unwritten() (delta, at store.GatewayCounters, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delta = subCounters(c.c, c.stored)
	return delta, c.c, delta != store.GatewayCounters{}
}

// written takes the store's total after unwritten's delta was added to
// it, at being the counters unwritten returned: what was counted since
// stays on top, to be added at the next write.
func (c *counters) written(at, total store.GatewayCounters) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = addCounters(total, subCounters(c.c, at))
	c.stored = total
}

func addCounters(a, b store.GatewayCounters) store.GatewayCounters {
	return store.GatewayCounters{
		Requests: a.Requests + b.Requests, Rejected: a.Rejected + b.Rejected, Errors: a.Errors + b.Errors,
		BytesIn: a.BytesIn + b.BytesIn, BytesOut: a.BytesOut + b.BytesOut,
		InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens, TotalTokens: a.TotalTokens + b.TotalTokens,
	}
}

func subCounters(a, b store.GatewayCounters) store.GatewayCounters {
	return store.GatewayCounters{
		Requests: a.Requests - b.Requests, Rejected: a.Rejected - b.Rejected, Errors: a.Errors - b.Errors,
		BytesIn: a.BytesIn - b.BytesIn, BytesOut: a.BytesOut - b.BytesOut,
		InputTokens: a.InputTokens - b.InputTokens, OutputTokens: a.OutputTokens - b.OutputTokens, TotalTokens: a.TotalTokens - b.TotalTokens,
	}
}

func (c *counters) snapshot() store.GatewayCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

func (c *counters) wire(provider string) wire.GatewayUsage {
	c.mu.Lock()
	s, reserved := c.c, c.reserved
	c.mu.Unlock()
	return wire.GatewayUsage{
		Provider: provider, Requests: s.Requests, Rejected: s.Rejected, Errors: s.Errors,
		BytesIn: s.BytesIn, BytesOut: s.BytesOut,
		InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, TotalTokens: s.TotalTokens,
		ReservedTokens: reserved,
	}
}
