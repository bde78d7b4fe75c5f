package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// tokenPrefix marks gateway tokens, so that one found in a log or a
// repository is recognisable (and secret scanners can match it).
const tokenPrefix = "hcgw_"

// newToken returns a random token and its hash. 32 random bytes need no
// slow hash: nobody can guess a preimage of a SHA-256 of them.
func newToken() (string, [32]byte) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return tok, hashToken(tok)
}

// wellFormed reports whether tok has the shape of a token newToken makes,
// so that a guess of another shape costs no store look-up.
func wellFormed(tok string) bool {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(32) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

func hashToken(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }

func formatHash(h [32]byte) string { return hex.EncodeToString(h[:]) }

func parseHash(s string) ([32]byte, bool) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, false
	}
	copy(h[:], b)
	return h, true
}
