package agentauth

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey() []byte { return bytes.Repeat([]byte{7}, 32) }

func TestHelloRoundTrip(t *testing.T) {
	t.Parallel()
	h := Hello{Sandbox: "sb-abc123", Token: Token(testKey(), "sb-abc123")}
	line, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// What follows the line is not consumed.
	r := bytes.NewReader(append(line, "yamux"...))
	got, err := ReadHello(r)
	if err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Errorf("got %+v, want %+v", got, h)
	}
	if r.Len() != len("yamux") {
		t.Errorf("ReadHello consumed %d bytes past the line", len("yamux")-r.Len())
	}
	if !Verify(testKey(), got) {
		t.Error("the sandbox's own token does not verify")
	}
}

// TestTokenBindsSandbox: a credential is useless for any other sandbox and
// under any other daemon key.
func TestTokenBindsSandbox(t *testing.T) {
	t.Parallel()
	key := testKey()
	mine := Token(key, "sb-a")
	for _, tc := range []struct {
		name string
		key  []byte
		h    Hello
	}{
		{"neighbour's id with my token", key, Hello{Sandbox: "sb-b", Token: mine}},
		{"id that prefixes mine", key, Hello{Sandbox: "sb", Token: mine}},
		{"one digit off", key, Hello{Sandbox: "sb-a", Token: flip(mine)}},
		{"all zeros", key, Hello{Sandbox: "sb-a", Token: strings.Repeat("0", TokenLen)}},
		{"another daemon's key", bytes.Repeat([]byte{8}, 32), Hello{Sandbox: "sb-a", Token: mine}},
	} {
		if Verify(tc.key, tc.h) {
			t.Errorf("%s: verified", tc.name)
		}
	}
}

func flip(tok string) string {
	b := []byte(tok)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}

func TestReadHelloRefuses(t *testing.T) {
	t.Parallel()
	tok := Token(testKey(), "a")
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"no newline", "HCAGENT1 a " + tok},
		{"other magic", "HCAGENT2 a " + tok + "\n"},
		{"http", "GET / HTTP/1.1\r\n"},
		{"no token", "HCAGENT1 a\n"},
		{"short token", "HCAGENT1 a " + tok[:10] + "\n"},
		{"upper-case token", "HCAGENT1 a " + strings.ToUpper(tok) + "\n"},
		{"slash in id", "HCAGENT1 ../a " + tok + "\n"},
		{"extra field", "HCAGENT1 a " + tok + " x\n"},
		{"endless", strings.Repeat("A", 10000)},
		{"long id", "HCAGENT1 " + strings.Repeat("a", MaxIDLen+1) + " " + tok + "\n"},
	} {
		if h, err := ReadHello(strings.NewReader(tc.in)); err == nil {
			t.Errorf("%s: parsed as %+v", tc.name, h)
		}
	}
}

// FuzzParseHello: whatever bytes come, the parser neither panics nor
// accepts a hello that would not marshal back to the same line.
func FuzzParseHello(f *testing.F) {
	tok := Token(testKey(), "sb-1")
	f.Add([]byte("HCAGENT1 sb-1 " + tok + "\n"))
	f.Add([]byte("HCAGENT1  " + tok + "\n"))
	f.Add([]byte("HCAGENT1 sb-1 " + tok + " \n"))
	f.Add([]byte("\x16\x03\x01\x00"))
	f.Add([]byte("HCAGENT1 sb-1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ReadHello(bytes.NewReader(in))
		if err != nil {
			return
		}
		line, err := h.Marshal()
		if err != nil {
			t.Fatalf("parsed %q into %+v, which does not marshal: %v", in, h, err)
		}
		if !bytes.HasPrefix(in, line) {
			t.Fatalf("parsed %q into %+v, which marshals to %q", in, h, line)
		}
	})
}

// TestMaterial: the material is made once with mode 0600, read back the
// same after a restart, and a client pinned to it completes a handshake,
// while one pinned to another daemon's certificate does not.
func TestMaterial(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "agent-channel")
	m, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{certFile, keyFile, hmacFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	again, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CertPEM, m.CertPEM) || !bytes.Equal(again.TokenKey, m.TokenKey) {
		t.Error("a second load made new material: running boxes would lose the daemon")
	}
	other, err := LoadOrCreate(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, m, m.CertPEM); err != nil {
		t.Errorf("pinned to the daemon's certificate: %v", err)
	}
	if err := handshake(t, m, other.CertPEM); err == nil {
		t.Error("pinned to another certificate: the handshake succeeded")
	}
}

func handshake(t *testing.T, m *Material, pin []byte) error {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	conf, err := ClientConfig(pin)
	if err != nil {
		t.Fatal(err)
	}
	// Dialled by IP: the pin and the server name decide, not the address.
	c, err := tls.Dial("tcp", ln.Addr().String(), conf)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// TestMaterialBundle: material made for a store round-trips through its
// PEM bundle and serves the handshake and credentials as made; Load reads
// what LoadOrCreate wrote and nothing from an empty dir.
func TestMaterialBundle(t *testing.T) {
	t.Parallel()
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseMaterial(m.MarshalPEM())
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(m) || !bytes.Equal(back.TokenKey, m.TokenKey) || !bytes.Equal(back.CertPEM, m.CertPEM) {
		t.Error("the bundle read back is not the material")
	}
	// The agent pinned to the original's certificate reaches a daemon
	// serving the bundle's.
	if err := handshake(t, back, m.CertPEM); err != nil {
		t.Errorf("pinned to the certificate before the round trip: %v", err)
	}
	other, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if other.Equal(m) {
		t.Error("two New calls made the same material")
	}
	tokenOnly := []byte(strings.SplitAfter(string(m.MarshalPEM()), "-----END EC PRIVATE KEY-----\n")[1])
	for name, bad := range map[string][]byte{
		"empty":          nil,
		"not PEM":        []byte("hello"),
		"no token key":   append(append([]byte(nil), m.CertPEM...), m.keyPEM...),
		"token key only": tokenOnly,
		"foreign block":  append(m.MarshalPEM(), "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"...),
		"key of another": append(append(append([]byte(nil), m.CertPEM...), other.keyPEM...), tokenOnly...),
	} {
		if _, err := ParseMaterial(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}

	dir := filepath.Join(t.TempDir(), "agent-channel")
	if got, err := Load(dir); got != nil || err != nil {
		t.Fatalf("Load of an empty dir: %v, %v; want nothing", got, err)
	}
	made, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(dir)
	if err != nil || loaded == nil || !loaded.Equal(made) {
		t.Fatalf("Load after LoadOrCreate: %v, %v; want the same material", loaded, err)
	}
	if err := os.Remove(filepath.Join(dir, keyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load with the certificate's key missing: no error")
	}
}
