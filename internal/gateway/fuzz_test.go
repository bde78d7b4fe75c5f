package gateway

import (
	"net/url"
	"strings"
	"testing"
)

func TestUsageParser(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ct, body string
		in, out, total int64
	}{
		{"openai json", "application/json", `{"choices":[{"message":{"content":"say \"usage\": {\"prompt_tokens\": 99}"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, 3, 4, 7},
		{"anthropic json with cache", "application/json; charset=utf-8", `{"usage":{"input_tokens":5,"cache_read_input_tokens":10,"output_tokens":2}}`, 15, 2, 17},
		{"no usage", "application/json", `{"data":[]}`, 0, 0, 0},
		{"not json", "text/plain", `{"usage":{"input_tokens":5}}`, 0, 0, 0},
		{"openai sse", "text/event-stream", "data: {\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":9,\"total_tokens\":17}}\n\ndata: [DONE]\n\n", 8, 9, 17},
		{"anthropic sse crlf", "text/event-stream", "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\r\n\r\nevent: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":30}}\r\n\r\n", 20, 30, 50},
		{"responses api sse", "text/event-stream", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":6,\"total_tokens\":10}}}\n\n", 4, 6, 10},
		{"sse without final blank line", "text/event-stream", "data: {\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}", 1, 2, 3},
	} {
		// Every split of the body gives the same answer as the whole.
		for _, step := range []int{1, 3, 7, len(tc.body)} {
			var u usageParser
			u.contentType(tc.ct)
			for i := 0; i < len(tc.body); i += step {
				u.write([]byte(tc.body[i:min(i+step, len(tc.body))]))
			}
			got := u.result()
			if got != (usage{tc.in, tc.out, tc.total}) {
				t.Errorf("%s (chunks of %d): got %+v, want %d/%d/%d", tc.name, step, got, tc.in, tc.out, tc.total)
			}
		}
	}
}

func FuzzUsageParser(f *testing.F) {
	f.Add("text/event-stream", "data: {\"usage\":{\"input_tokens\":1}}\n\n", 3)
	f.Add("application/json", `{"usage":{"prompt_tokens":1,"total_tokens":2}}`, 1)
	f.Add("text/event-stream", "data: {\"message\":{\"usage\":{\"output_tokens\":-5}}}\r\n\r\n", 2)
	f.Fuzz(func(t *testing.T, ct, body string, step int) {
		if step <= 0 || step > len(body) {
			step = len(body) + 1
		}
		var whole, parts usageParser
		whole.contentType(ct)
		parts.contentType(ct)
		whole.write([]byte(body))
		for i := 0; i < len(body); i += step {
			parts.write([]byte(body[i:min(i+step, len(body))]))
		}
		a, b := whole.result(), parts.result()
		if a != b {
			t.Errorf("whole %+v, in chunks of %d %+v", a, step, b)
		}
		if a.input < 0 || a.output < 0 {
			t.Errorf("negative usage %+v", a)
		}
	})
}

func FuzzTargetPath(f *testing.F) {
	for _, s := range []string{"/chat/completions", "/../x", "/%2e%2e/x", "/a%2fb", "/a/./b", "/%41", "/a%20b", "/", "//x", "/a\\b"} {
		f.Add(s)
	}
	p := &provider{base: &url.URL{Scheme: "https", Host: "api.example.com", Path: "/v1"}}
	f.Fuzz(func(t *testing.T, rest string) {
		u, err := p.target(rest, "")
		if err != nil {
			return
		}
		if u.Host != "api.example.com" || u.Scheme != "https" {
			t.Fatalf("%q: left the upstream: %s", rest, u)
		}
		if !strings.HasPrefix(u.Path, "/v1/") {
			t.Fatalf("%q: path %q is outside the base", rest, u.Path)
		}
		for _, seg := range strings.Split(u.Path, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("%q: dot segment in %q", rest, u.Path)
			}
		}
		// What goes on the wire decodes to the same path.
		dec, err := url.PathUnescape(u.EscapedPath())
		if err != nil || dec != u.Path {
			t.Fatalf("%q: escaped %q decodes to %q, want %q", rest, u.EscapedPath(), dec, u.Path)
		}
	})
}
