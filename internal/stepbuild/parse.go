// Package stepbuild builds a template's Dockerfile inside running boxes,
// step by step, for a driver with no image builder (Kubernetes): RUN runs
// in a box through its agent, COPY and ADD send the build context's files
// there, and ENV, ARG, WORKDIR, USER, LABEL and SHELL are kept by the
// builder. Each stage runs in a box of its base; COPY --from reads another
// stage's box, or a box of an image. The last stage's box's root
// filesystem is then the image (its driver commits it). What it cannot do
// the same as Docker's builder is refused with the line that asks for it.
package stepbuild

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// Instructions a Plan holds.
const (
	OpRun     = "RUN"
	OpCopy    = "COPY"
	OpAdd     = "ADD"
	OpEnv     = "ENV"
	OpArg     = "ARG"
	OpWorkdir = "WORKDIR"
	OpUser    = "USER"
	OpLabel   = "LABEL"
	OpShell   = "SHELL"
	// OpNote is an instruction that does not change the image here
	// (CMD, ENTRYPOINT, EXPOSE, ...: the agent is the box's first
	// process); the build says so and goes on.
	OpNote = "NOTE"
)

// Plan is a Dockerfile as the builder runs it.
type Plan struct {
	// PreArgs are the ARGs before the first FROM: they may be used in the
	// FROMs, and a stage's ARG of the same name and no default takes the
	// value.
	PreArgs []KV
	// Stages are the FROMs and what follows each; the last one is the
	// image.
	Stages []Stage
}

// Stage is a FROM and its steps.
type Stage struct {
	Line  int    // the FROM's
	From  string // the base, its ARGs not yet substituted: an image or an earlier stage's name
	Name  string // AS name, lower-cased; "" for none
	Steps []Step
}

// KV is a name and a value (ENV, ARG, LABEL).
type KV struct {
	Key, Value string
	// HasValue is false for an ARG with no default.
	HasValue bool
}

// Step is one instruction after FROM.
type Step struct {
	Line int    // where it starts in the Dockerfile, from 1
	Text string // the instruction as written, joined on one line
	Op   string
	// Exec is RUN's or SHELL's JSON form; Shell is RUN's shell form.
	Exec  []string
	Shell string
	// Sources and Dest are COPY's and ADD's; Chown its --chown, Chmod its
	// --chmod (-1 for none).
	Sources []string
	Dest    string
	Chown   string
	Chmod   int64
	// CopyFrom is COPY's --from as written: a stage or an image.
	// FromStage is the earlier stage it names, or -1 for an image.
	CopyFrom  string
	FromStage int
	// Heredocs are the step's here-documents: a COPY's sources, or the
	// RUN's (Script: the one document is the script; else Shell has them
	// for the shell to read).
	Heredocs []Heredoc
	Script   bool
	// Mounts are RUN's --mounts; NoNetwork its --network=none.
	Mounts    []Mount
	NoNetwork bool
	// KVs are ENV's, ARG's and LABEL's.
	KVs []KV
	// Arg is WORKDIR's path or USER's user.
	Arg string
}

// maxDockerfile bounds the Dockerfile the parser reads.
const maxDockerfile = 1 << 20

// Parse reads a Dockerfile. An error is errdefs.ErrInvalidArgument naming
// the line.
func Parse(dockerfile []byte) (Plan, error) {
	var p Plan
	if len(dockerfile) > maxDockerfile {
		return p, errdefs.Invalid("dockerfile", "is %d bytes, more than %d", len(dockerfile), maxDockerfile)
	}
	lines, err := logicalLines(dockerfile)
	if err != nil {
		return p, err
	}
	var cur *Stage
	for _, l := range lines {
		op, rest, _ := strings.Cut(l.text, " ")
		op = strings.ToUpper(op)
		rest = strings.TrimSpace(rest)
		bad := func(format string, args ...any) error {
			return errdefs.Invalid("dockerfile", "line %d: %s: %s", l.line, op, fmt.Sprintf(format, args...))
		}
		if op == "FROM" {
			st, err := parseFrom(rest, p.Stages)
			if err != nil {
				return p, bad("%v", err)
			}
			st.Line = l.line
			p.Stages = append(p.Stages, st)
			cur = &p.Stages[len(p.Stages)-1]
			continue
		}
		if cur == nil {
			if op != OpArg {
				return p, bad("comes before FROM (only ARG may)")
			}
			kvs, err := parseArg(rest)
			if err != nil {
				return p, bad("%v", err)
			}
			p.PreArgs = append(p.PreArgs, kvs...)
			continue
		}
		st := Step{Line: l.line, Text: l.text, Op: op, FromStage: -1, Chmod: -1}
		switch op {
		case OpRun:
			for strings.HasPrefix(rest, "--") {
				flag, after, _ := strings.Cut(rest, " ")
				rest = strings.TrimSpace(after)
				if err := runFlag(&st, flag, p.Stages); err != nil {
					return p, bad("%v", err)
				}
			}
			if rest == "" {
				return p, bad("runs nothing")
			}
			if exec, ok, err := jsonForm(rest); ok || err != nil {
				if err != nil || len(exec) == 0 {
					return p, bad("the JSON form must be a non-empty array of strings")
				}
				st.Exec = exec
			} else if len(l.heredocs) == 1 && heredocMark.FindString(rest) == rest {
				// RUN <<EOF: the document is the script.
				st.Heredocs, st.Script = l.heredocs, true
			} else {
				// The shell reads the documents, as written.
				st.Shell = rest
				for _, d := range l.heredocs {
					st.Shell += "\n" + d.Body + d.Name
				}
				st.Heredocs = l.heredocs
			}
		case OpCopy, OpAdd:
			args := rest
			for strings.HasPrefix(args, "--") {
				flag, after, _ := strings.Cut(args, " ")
				args = strings.TrimSpace(after)
				if v, ok := strings.CutPrefix(flag, "--chown="); ok && v != "" {
					st.Chown = v
					continue
				}
				if v, ok := strings.CutPrefix(flag, "--chmod="); ok {
					m, err := strconv.ParseUint(v, 8, 32)
					if err != nil || m > 0o7777 {
						return p, bad("%s: want an octal mode such as 755", clip(flag))
					}
					st.Chmod = int64(m)
					continue
				}
				if flag == "--link" || flag == "--link=true" {
					continue // the steps are one layer here: a linked COPY lands the same
				}
				if v, ok := strings.CutPrefix(flag, "--from="); ok && op == OpCopy {
					if err := copyFrom(&st, v, p.Stages); err != nil {
						return p, bad("%v", err)
					}
					continue
				}
				if op == OpCopy {
					return p, bad("%s is not taken here (only --chown, --chmod, --link and --from)", clip(flag))
				}
				return p, bad("%s is not taken here (only --chown, --chmod and --link)", clip(flag))
			}
			f, isJSON, err := jsonForm(args)
			if !isJSON {
				f, err = words(args)
			}
			if err != nil {
				return p, bad("%v", err)
			}
			if len(f) < 2 {
				return p, bad("want sources and a destination")
			}
			st.Sources, st.Dest = f[:len(f)-1], f[len(f)-1]
			if slices.Contains(f, "") {
				return p, bad("a source or the destination is empty")
			}
			if len(l.heredocs) > 0 {
				if st.CopyFrom != "" || slices.ContainsFunc(st.Sources, func(s string) bool { return heredocMark.FindString(s) != s }) {
					return p, bad("a COPY of here-documents takes no other source")
				}
				st.Heredocs = l.heredocs
			}
			for _, s := range st.Sources {
				if strings.Contains(s, "://") {
					return p, bad("%s: a URL; fetch it in a RUN step instead", clip(s))
				}
				if st.CopyFrom != "" && isGlob(path.Dir(path.Clean("/"+s))) {
					return p, bad("%s: with --from a wildcard is taken in the last name only", clip(s))
				}
				if st.CopyFrom != "" && isGlob(s) {
					if _, err := path.Match(path.Base(s), ""); err != nil {
						return p, bad("%s: %v", clip(s), err)
					}
				}
			}
		case OpEnv, OpLabel:
			kvs, err := parseKVs(rest, op == OpEnv)
			if err != nil {
				return p, bad("%v", err)
			}
			st.KVs = kvs
		case OpArg:
			kvs, err := parseArg(rest)
			if err != nil {
				return p, bad("%v", err)
			}
			st.KVs = kvs
		case OpWorkdir, OpUser:
			if rest == "" {
				return p, bad("is empty")
			}
			st.Arg = rest
		case OpShell:
			exec, ok, err := jsonForm(rest)
			if !ok || err != nil || len(exec) == 0 {
				return p, bad("want a JSON array, such as [\"/bin/bash\", \"-c\"]")
			}
			st.Exec = exec
		case "CMD", "ENTRYPOINT", "EXPOSE", "HEALTHCHECK", "STOPSIGNAL", "VOLUME", "MAINTAINER":
			st.Op = OpNote
		case "ONBUILD":
			return p, bad("is not taken here")
		default:
			return p, bad("is not a Dockerfile instruction")
		}
		cur.Steps = append(cur.Steps, st)
	}
	if len(p.Stages) == 0 {
		return p, errdefs.Invalid("dockerfile", "has no FROM")
	}
	return p, nil
}

// Mount types RUN --mount takes.
const (
	MountCache  = "cache"
	MountTmpfs  = "tmpfs"
	MountBind   = "bind"
	MountSecret = "secret"
)

// Mount is a RUN --mount: a directory the command sees at Target and the
// image does not keep. A cache or tmpfs mount starts empty (a cache kept
// between builds is an optimisation, which a build may lack); a bind
// mount holds Source of the build context, or of a stage or an image
// (From, FromStage as COPY's); a secret mount is never given (template
// builds take no secrets), which fails the step when Required.
type Mount struct {
	Type, Target, Source string
	From                 string
	FromStage            int
	ID                   string
	Required             bool
}

// runFlag reads one of RUN's flags into st.
func runFlag(st *Step, flag string, stages []Stage) error {
	name, v, _ := strings.Cut(flag, "=")
	switch name {
	case "--mount":
		m, err := parseMount(v, stages)
		if err != nil {
			return fmt.Errorf("%s: %v", clip(flag), err)
		}
		st.Mounts = append(st.Mounts, m)
		return nil
	case "--network":
		switch v {
		case "default":
			return nil
		case "none":
			st.NoNetwork = true
			return nil
		}
		return fmt.Errorf("%s is not taken here (default, or none)", clip(flag))
	}
	return fmt.Errorf("%s is not taken here (only --mount and --network)", clip(flag))
}

// parseMount reads a --mount's comma-separated key=value fields.
func parseMount(spec string, stages []Stage) (Mount, error) {
	m := Mount{Type: MountBind, FromStage: -1}
	for _, f := range strings.Split(spec, ",") {
		k, v, hasValue := strings.Cut(f, "=")
		switch strings.ToLower(k) {
		case "type":
			m.Type = v
		case "target", "dst", "destination":
			m.Target = v
		case "source", "src":
			m.Source = v
		case "from":
			m.From = v
		case "id":
			m.ID = v
		case "required":
			m.Required = !hasValue || v == "true"
		case "sharing", "mode", "uid", "gid", "size", "readonly", "ro", "rw", "readwrite", "env":
			// Nothing to do: the mount starts empty, or is a copy.
		default:
			return m, fmt.Errorf("%s is not a mount option", clip(k))
		}
	}
	switch m.Type {
	case MountCache, MountTmpfs, MountBind:
		if m.Target == "" {
			return m, fmt.Errorf("a %s mount needs a target", m.Type)
		}
	case MountSecret:
		if m.ID == "" && m.Target == "" {
			return m, fmt.Errorf("a secret mount needs an id or a target")
		}
		return m, nil
	case "ssh":
		return m, fmt.Errorf("ssh mounts are not taken here: fetch what needs the key before the build")
	default:
		return m, fmt.Errorf("%s is not a mount type (cache, tmpfs, bind, secret)", clip(m.Type))
	}
	if m.From != "" {
		if m.Type != MountBind {
			return m, fmt.Errorf("from is for a bind mount")
		}
		st := Step{FromStage: -1}
		if err := copyFrom(&st, m.From, stages); err != nil {
			return m, err
		}
		m.FromStage = st.FromStage
	}
	if m.Source != "" && m.Type != MountBind {
		return m, fmt.Errorf("source is for a bind mount")
	}
	if m.Source == "" {
		m.Source = "."
	}
	return m, nil
}

// parseFrom reads a FROM's arguments: image [AS name], after the stages
// before.
func parseFrom(rest string, before []Stage) (Stage, error) {
	f := strings.Fields(rest)
	if len(f) == 0 {
		return Stage{}, fmt.Errorf("names no image")
	}
	if strings.HasPrefix(f[0], "--") {
		return Stage{}, fmt.Errorf("%s is not taken here (the image runs on the cluster's nodes as they are)", clip(f[0]))
	}
	if len(f) != 1 && !(len(f) == 3 && strings.EqualFold(f[1], "AS")) {
		return Stage{}, fmt.Errorf("want FROM image [AS name]")
	}
	st := Stage{From: f[0]}
	if len(f) == 3 {
		st.Name = strings.ToLower(f[2])
		if !stageName(st.Name) {
			return Stage{}, fmt.Errorf("%s is not a stage name: a letter, then letters, digits, -, _ and .", clip(f[2]))
		}
		if slices.ContainsFunc(before, func(b Stage) bool { return b.Name == st.Name }) {
			return Stage{}, fmt.Errorf("the stage name %s is taken by an earlier stage", clip(f[2]))
		}
	}
	return st, nil
}

// stageName is a name an AS may give: a letter, then letters, digits, -,
// _ and ., as Docker's builder takes.
func stageName(s string) bool {
	for i, c := range s {
		letter := c >= 'a' && c <= 'z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// copyFrom reads COPY's --from: an earlier stage by name or number, else
// an image. stages ends with the stage the COPY is in.
func copyFrom(st *Step, v string, stages []Stage) error {
	if v == "" {
		return fmt.Errorf("--from names nothing")
	}
	before, this := stages[:len(stages)-1], stages[len(stages)-1]
	if this.Name != "" && this.Name == strings.ToLower(v) || v == strconv.Itoa(len(before)) {
		return fmt.Errorf("--from=%s is the stage this step is in; name an earlier one", clip(v))
	}
	if strings.ContainsAny(v, "$") {
		return fmt.Errorf("--from=%s: a variable is not taken in --from here; name the stage or the image", clip(v))
	}
	st.CopyFrom = v
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n >= len(before) {
			return fmt.Errorf("--from=%d: there are %d stages before this one, numbered from 0", n, len(before))
		}
		st.FromStage = n
		return nil
	}
	for i, b := range before {
		if b.Name != "" && b.Name == strings.ToLower(v) {
			st.FromStage = i
			return nil
		}
	}
	st.FromStage = -1
	return nil
}

type logicalLine struct {
	line     int
	text     string
	heredocs []Heredoc
}

// Heredoc is a here-document of a RUN or a COPY (`<<EOF` ... `EOF`).
type Heredoc struct {
	Name string // its delimiter
	Body string // its lines as written, each ending with a newline
	// Quoted is a delimiter in quotes (no substitution in the body);
	// Strip is <<- (leading tabs go).
	Quoted, Strip bool
}

// heredocMark is a here-document's start in an instruction.
var heredocMark = regexp.MustCompile(`<<(-?)(["']?)([A-Za-z_][A-Za-z0-9_]*)(["']?)`)

// heredocsOf are the here-documents op's text starts (RUN and COPY take
// them).
func heredocsOf(text string) []Heredoc {
	op, _, _ := strings.Cut(text, " ")
	if op = strings.ToUpper(op); op != OpRun && op != OpCopy {
		return nil
	}
	var out []Heredoc
	for _, ix := range heredocMark.FindAllStringSubmatchIndex(text, -1) {
		m := func(i int) string { return text[ix[2*i]:ix[2*i+1]] }
		if m(2) != m(4) || quoted(text[:ix[0]]) {
			continue // quotes that do not match, or inside a quoted word: not a delimiter
		}
		out = append(out, Heredoc{Name: m(3), Quoted: m(2) != "", Strip: m(1) == "-"})
	}
	return out
}

// quoted says whether a quote is open at the end of s.
func quoted(s string) bool {
	var q byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case q == 0 && c == '\\':
			i++
		case q == 0 && (c == '"' || c == '\''):
			q = c
		case q == '"' && c == '\\':
			i++
		case c == q:
			q = 0
		}
	}
	return q != 0
}

// logicalLines joins continued lines (a trailing backslash) and drops
// comments and blank lines. A parser directive other than syntax (an
// escape character of its own) is refused.
func logicalLines(b []byte) ([]logicalLine, error) {
	var out []logicalLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxDockerfile)
	var cur strings.Builder
	start, n, directives := 0, 0, true
	var docs []Heredoc // the here-documents being read, the first one's lines next
	for sc.Scan() {
		n++
		raw := strings.TrimRight(sc.Text(), "\r")
		if len(docs) > 0 {
			d := &out[len(out)-1].heredocs[len(out[len(out)-1].heredocs)-len(docs)]
			end := raw
			if d.Strip {
				end = strings.TrimLeft(raw, "\t")
			}
			if end == d.Name {
				docs = docs[1:]
				continue
			}
			d.Body += raw + "\n"
			continue
		}
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "#") {
			if directives {
				k, _, ok := strings.Cut(strings.TrimSpace(trimmed[1:]), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "escape") {
					return nil, errdefs.Invalid("dockerfile", "line %d: the escape directive is not taken here (the escape character is \\)", n)
				}
			}
			continue // a comment, also inside a continued instruction
		}
		directives = false
		if trimmed == "" && cur.Len() == 0 {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body)
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(trimmed)
		l := logicalLine{line: start, text: strings.TrimSpace(cur.String())}
		l.heredocs = heredocsOf(l.text)
		docs = l.heredocs
		out = append(out, l)
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, errdefs.Invalid("dockerfile", "line %d: %v", n+1, err)
	}
	if len(docs) > 0 {
		return nil, errdefs.Invalid("dockerfile", "line %d: the here-document %s has no end line", out[len(out)-1].line, clip(docs[0].Name))
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, logicalLine{line: start, text: s})
	}
	return out, nil
}

// jsonForm reads an instruction's JSON form; ok says it is one (it starts
// with [), err that it is a bad one.
func jsonForm(s string) (argv []string, ok bool, err error) {
	if !strings.HasPrefix(s, "[") {
		return nil, false, nil
	}
	if err := json.Unmarshal([]byte(s), &argv); err != nil {
		// Docker runs a line that is not valid JSON in the shell form.
		return nil, false, nil
	}
	return argv, true, nil
}

// words splits on blanks, keeping quoted strings ("a b", 'a b') whole and
// taking a backslash as escaping the next character outside single quotes.
// A $ that must stay one (escaped, or in single quotes) is left as \$ for
// expand.
func words(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote, esc := false, byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			if c == '$' {
				cur.WriteByte('\\') // kept for expand: a literal $
			}
			cur.WriteByte(c)
			esc, in = false, true
		case c == '\\' && quote != '\'':
			esc = true
		case quote != 0:
			switch {
			case c == quote:
				quote = 0
			case c == '$' && quote == '\'':
				cur.WriteString(`\$`) // no substitution in single quotes
			default:
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("a quote is not closed")
	}
	if esc {
		cur.WriteByte('\\')
		in = true
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// parseKVs reads ENV's or LABEL's name=value pairs; ENV also takes the
// old form, "ENV name the rest of the line".
func parseKVs(s string, legacy bool) ([]KV, error) {
	f, err := words(s)
	if err != nil {
		return nil, err
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("names nothing")
	}
	if legacy && !strings.Contains(f[0], "=") {
		name, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
		if err := checkName(name); err != nil {
			return nil, err
		}
		return []KV{{Key: name, Value: strings.TrimSpace(rest), HasValue: true}}, nil
	}
	var out []KV
	for _, w := range f {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, fmt.Errorf("%s: want name=value", clip(w))
		}
		if legacy {
			if err := checkName(k); err != nil {
				return nil, err
			}
		} else if k == "" {
			return nil, fmt.Errorf("a label with no name")
		}
		out = append(out, KV{Key: k, Value: v, HasValue: true})
	}
	return out, nil
}

// parseArg reads ARG name[=default] ...
func parseArg(s string) ([]KV, error) {
	f, err := words(s)
	if err != nil {
		return nil, err
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("names nothing")
	}
	var out []KV
	for _, w := range f {
		k, v, ok := strings.Cut(w, "=")
		if err := checkName(k); err != nil {
			return nil, err
		}
		out = append(out, KV{Key: k, Value: v, HasValue: ok})
	}
	return out, nil
}

func checkName(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00 \t$") {
		return fmt.Errorf("%s is not a variable name", clip(k))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
}
