// Package agentauth is what both ends of the agent channel over TCP agree
// on: the hello an agent sends after the TLS handshake (its sandbox id and
// that sandbox's credential), how the daemon derives a sandbox's credential
// and checks one, and how the agent pins the daemon's certificate. It uses
// only the standard library, so the agent may import it.
//
// Why a hello after TLS rather than a client certificate per sandbox: the
// credential must be checked against the sandbox id the connection claims,
// and an HMAC of the id under a daemon key needs no per-sandbox state, no
// CA issuing certificates and nothing to revoke: a destroyed sandbox's id is
// simply no longer routed. The server side stays TLS-pinned (the agent
// trusts exactly the daemon's certificate), so the credential is sent only
// to the daemon that made it.
package agentauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// ServerName is the name in the daemon's channel certificate and the one
// the agent verifies: the address it dials may be any IP or name.
const ServerName = "hotcell-agent-channel"

// helloMagic starts every hello: a version, so a later format can be told
// apart, and a cheap way to drop what is not an agent at once.
const helloMagic = "HCAGENT1"

// MaxHello bounds a hello line, newline included: the magic, a sandbox id
// (at most MaxIDLen) and a token, with room to spare. The daemon reads no
// more than this from a connection before it is routed.
const MaxHello = 256

// MaxIDLen bounds the sandbox id a hello may carry.
const MaxIDLen = 128

// TokenLen is the length of a token: a hex HMAC-SHA256.
const TokenLen = 2 * sha256.Size

// Hello is what an agent says after the TLS handshake: which sandbox it
// serves and the credential that proves it.
type Hello struct {
	Sandbox string
	Token   string
}

// ErrBadHello is a hello that does not parse.
var ErrBadHello = errors.New("bad agent hello")

// Marshal returns the hello's line. It fails on a field ParseHello would
// refuse, so an agent never sends what the daemon cannot read.
func (h Hello) Marshal() ([]byte, error) {
	if !validID(h.Sandbox) {
		return nil, fmt.Errorf("%w: sandbox id %q", ErrBadHello, h.Sandbox)
	}
	if !validToken(h.Token) {
		return nil, fmt.Errorf("%w: token is not %d hex digits", ErrBadHello, TokenLen)
	}
	return []byte(helloMagic + " " + h.Sandbox + " " + h.Token + "\n"), nil
}

// ReadHello reads one hello line from r, at most MaxHello bytes, and
// parses it. It reads a byte at a time (r is a TLS connection, which
// buffers its records), so nothing after the line is consumed: the
// session that follows starts at the next byte.
func ReadHello(r io.Reader) (Hello, error) {
	var buf [MaxHello]byte
	n := 0
	for n < len(buf) {
		if _, err := io.ReadFull(r, buf[n:n+1]); err != nil {
			return Hello{}, fmt.Errorf("read agent hello: %w", err)
		}
		n++
		if buf[n-1] == '\n' {
			return ParseHello(buf[:n])
		}
	}
	return Hello{}, fmt.Errorf("%w: no newline in %d bytes", ErrBadHello, MaxHello)
}

// ParseHello parses one hello line (with its newline).
func ParseHello(line []byte) (Hello, error) {
	if len(line) > MaxHello {
		return Hello{}, fmt.Errorf("%w: longer than %d bytes", ErrBadHello, MaxHello)
	}
	rest, ok := bytes.CutSuffix(line, []byte("\n"))
	if !ok {
		return Hello{}, fmt.Errorf("%w: no newline", ErrBadHello)
	}
	magic, rest, ok := bytes.Cut(rest, []byte(" "))
	if !ok || string(magic) != helloMagic {
		return Hello{}, fmt.Errorf("%w: not an agent hello", ErrBadHello)
	}
	id, tok, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return Hello{}, fmt.Errorf("%w: no token", ErrBadHello)
	}
	if !validID(string(id)) {
		return Hello{}, fmt.Errorf("%w: bad sandbox id", ErrBadHello)
	}
	if !validToken(string(tok)) {
		return Hello{}, fmt.Errorf("%w: token is not %d hex digits", ErrBadHello, TokenLen)
	}
	return Hello{Sandbox: string(id), Token: string(tok)}, nil
}

// validID accepts the characters hotcell's sandbox ids are made of; the
// id is only a lookup key here, never a path or a log line unescaped.
func validID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validToken(tok string) bool {
	if len(tok) != TokenLen {
		return false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// tokenLabel separates this use of the daemon key from any later one.
const tokenLabel = "hotcell agent channel v1\x00"

// Token returns sandbox id's credential under the daemon's key: an
// HMAC-SHA256 of the id. It is useless for any other id (the HMAC binds
// it), needs no record (a daemon restart derives it again) and cannot be
// forged without the key, which never leaves the daemon's data dir.
func Token(key []byte, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(tokenLabel))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether h's token is its sandbox's credential under key,
// in time that does not depend on where a guess goes wrong.
func Verify(key []byte, h Hello) bool {
	want := Token(key, h.Sandbox)
	return subtle.ConstantTimeCompare([]byte(want), []byte(h.Token)) == 1
}
