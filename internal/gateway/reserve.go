package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

// maxInspect is how much of a request body the gateway holds to read its
// max_tokens and stream flags (and to add stream_options). A bigger body
// is forwarded as it streams, unread: it reserves by its length and the
// provider's default_max_tokens, and an answer without usage is charged
// that reservation.
const maxInspect = 4 << 20

// maxTokensCap bounds a request's own max_tokens × n, so that the sums
// below cannot overflow.
const maxTokensCap = 1 << 40

// callInfo is what the gateway knows of a request before it forwards it.
type callInfo struct {
	// metered: a model call (a POST under the provider's allowed paths);
	// its answer is charged pessimistically when it reports no usage.
	metered bool
	// inEst estimates the input tokens: body bytes / 4.
	inEst int64
	// maxOut is the most output tokens the request allows: its max_tokens
	// (× n), else the provider's default; 0 for embeddings and token counts.
	maxOut int64
	// injected: stream_options.include_usage was added to the body.
	injected bool
	// unread: the body was too big to read, so maxOut is the default and
	// may be less than the request asks for.
	unread bool
}

// reserve is what the call holds of the token budget while in flight.
func (c callInfo) reserve() int64 { return c.inEst + c.maxOut }

// inputEstimate is bytes / 4 rounded up: a generous count of the tokens
// in a JSON body (English text runs near 4 bytes a token, and JSON syntax
// adds bytes that are not tokens).
func inputEstimate(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + 3) / 4
}

// noOutput reports whether a path's answers have no output tokens.
func noOutput(rest string) bool {
	return strings.HasSuffix(rest, "/embeddings") || strings.HasSuffix(rest, "/count_tokens")
}

// wantsUsageOption reports whether a streamed request to this path must
// ask for its usage (OpenAI-style chat and legacy completions); the
// Responses API and Anthropic's messages always report it.
func (p *provider) wantsUsageOption(rest string) bool {
	return p.kind != "anthropic" && (strings.HasSuffix(rest, "/chat/completions") || strings.HasSuffix(rest, "/completions"))
}

// requestFields are the fields of a model call that bound its use.
type requestFields struct {
	MaxTokens           *json.Number    `json:"max_tokens"`
	MaxCompletionTokens *json.Number    `json:"max_completion_tokens"`
	MaxOutputTokens     *json.Number    `json:"max_output_tokens"`
	N                   *json.Number    `json:"n"`
	BestOf              *json.Number    `json:"best_of"`
	Stream              bool            `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
}

// positive reads a JSON number as a positive integer.
func positive(n *json.Number) (int64, bool) {
	if n == nil {
		return 0, false
	}
	v, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f <= 0 {
			return 0, false
		}
		if f > maxTokensCap {
			return maxTokensCap, true
		}
		v = int64(f)
	}
	if v <= 0 {
		return 0, false
	}
	return min(v, maxTokensCap), true
}

// inspect reads a model call's body (whole, at most maxInspect bytes):
// the output it allows and whether it streams. With addUsage, a streamed
// request gets stream_options.include_usage = true, so that its last
// chunk reports the usage; body is then the rewritten body. A body that
// is not a JSON object is returned as it is, with ok false.
func inspect(body []byte, addUsage bool) (f requestFields, out []byte, injected, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return requestFields{}, body, false, false
	}
	if dec.Decode(new(json.RawMessage)) != io.EOF {
		return requestFields{}, body, false, false // trailing data: not one document
	}
	if !addUsage || !f.Stream {
		return f, body, false, true
	}
	var opts map[string]json.RawMessage
	if len(f.StreamOptions) > 0 && !bytes.Equal(f.StreamOptions, []byte("null")) {
		if json.Unmarshal(f.StreamOptions, &opts) != nil {
			return f, body, false, true // the upstream will say what is wrong
		}
		var inc bool
		if json.Unmarshal(opts["include_usage"], &inc) == nil && inc {
			return f, body, false, true
		}
	}
	if opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return f, body, false, true
	}
	so, err := json.Marshal(opts)
	if err != nil {
		return f, body, false, true
	}
	doc["stream_options"] = so
	nb, err := json.Marshal(doc)
	if err != nil {
		return f, body, false, true
	}
	return f, nb, true, true
}

// maxOutput is the output a request allows: max_tokens (or the newer
// names) times the number of choices, else def.
func (f requestFields) maxOutput(def int64) int64 {
	m, ok := positive(f.MaxCompletionTokens)
	if !ok {
		m, ok = positive(f.MaxTokens)
	}
	if !ok {
		m, ok = positive(f.MaxOutputTokens)
	}
	if !ok {
		m = def
	}
	n, ok := positive(f.N)
	if b, bok := positive(f.BestOf); bok && (!ok || b > n) {
		n, ok = b, true
	}
	if ok && n > 1 {
		if m > maxTokensCap/min(n, maxTokensCap) {
			return maxTokensCap
		}
		m *= n
	}
	return min(m, maxTokensCap)
}

// settlement is what a finished call is charged: the usage it reported
// when it reported one and ended normally; otherwise an estimate that
// errs on the high side.
type settlement struct {
	call     callInfo
	status   int   // the upstream's status; 0 if none came
	cut      bool  // the answer did not end normally: the sandbox hung up or the upstream broke off
	inBytes  int64 // request body bytes sent upstream
	outBytes int64 // answer body bytes passed to the sandbox
	reported bool  // the answer carried a usage report
	sse      bool  // the answer was an event stream
	u        usage
}

// charge is the usage a call is charged.
//
//   - ended normally with a usage report: that report.
//   - cut off (a cancelled stream): what was sent, at least: the input
//     and the answer's bytes so far / 4, or the report if it says more.
//   - a refusal by the upstream (4xx, 5xx) without a report: nothing;
//     upstreams do not bill those.
//   - a model call that ended normally without a report (a stream that
//     did not ask for usage, an upstream that does not send it): its
//     whole reservation, or the answer's bytes / 4 if more. An event
//     stream's bytes are mostly framing, so they count only when the
//     request was too big to read its max_tokens.
func (s settlement) charge() usage {
	in := s.call.inEst
	if s.inBytes > 0 {
		in = inputEstimate(s.inBytes)
	}
	switch {
	case !s.call.metered:
		return s.u
	case s.reported && !s.cut:
		return s.u
	case s.cut:
		u := usage{input: in, output: inputEstimate(s.outBytes)}
		if s.reported {
			u.input = max(u.input, s.u.input)
			u.output = max(u.output, s.u.output)
		}
		u.total = max(u.input+u.output, s.u.total)
		return u
	case s.status >= 400 || s.status == 0:
		return s.u
	default:
		u := usage{input: in, output: s.call.maxOut}
		if !s.sse || s.call.unread {
			u.output = max(u.output, inputEstimate(s.outBytes))
		}
		u.total = u.input + u.output
		return u
	}
}
