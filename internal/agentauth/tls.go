package agentauth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Files of the daemon's channel material in its dir (<data-dir>/agent-channel,
// 0700). All are 0600: the certificate is public (every box gets it), but
// nothing in the dir needs to be readable by anyone but the daemon.
const (
	certFile = "cert.pem"
	keyFile  = "cert-key.pem"
	hmacFile = "token-key"
)

// certLifetime is how long the self-signed channel certificate lasts. It
// is pinned, not chained to a public CA, so a long life costs nothing a
// short one would save; a new one is made when it is near its end (boxes
// made before then keep the old pin and must be recreated: see docs).
const certLifetime = 10 * 365 * 24 * time.Hour

// Material is the daemon's side of the channel's secrets: its TLS
// certificate (self-signed, pinned by every agent) and the key that
// sandbox credentials are derived from.
type Material struct {
	Cert    tls.Certificate
	CertPEM []byte
	// TokenKey derives each sandbox's credential (Token).
	TokenKey []byte
	// keyPEM is Cert's private key, for MarshalPEM.
	keyPEM []byte
}

// tokenKeyBlock is the PEM block type of the token key in MarshalPEM's
// bundle.
const tokenKeyBlock = "HOTCELL AGENT TOKEN KEY"

// New makes new material, kept nowhere: the caller stores MarshalPEM's
// bundle (the store of a set of daemons, see docs/kubernetes.md).
func New() (*Material, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("agent channel token key: %w", err)
	}
	certPEM, keyPEM, err := newCert()
	if err != nil {
		return nil, err
	}
	return fromPEM(certPEM, keyPEM, key)
}

func fromPEM(certPEM, keyPEM, tokenKey []byte) (*Material, error) {
	if len(tokenKey) < 32 {
		return nil, fmt.Errorf("agent channel token key: %d bytes, want 32", len(tokenKey))
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("agent channel certificate: %w", err)
	}
	return &Material{Cert: cert, CertPEM: certPEM, TokenKey: tokenKey, keyPEM: keyPEM}, nil
}

// MarshalPEM returns the material as one PEM bundle: the certificate, its
// private key and the token key, in that order. It holds secrets: keep it
// where only the daemons may read it.
func (m *Material) MarshalPEM() []byte {
	out := append([]byte(nil), m.CertPEM...)
	out = append(out, m.keyPEM...)
	return append(out, pem.EncodeToMemory(&pem.Block{Type: tokenKeyBlock, Bytes: m.TokenKey})...)
}

// ParseMaterial reads MarshalPEM's bundle.
func ParseMaterial(bundle []byte) (*Material, error) {
	var certPEM, keyPEM, tokenKey []byte
	for rest := bundle; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			certPEM = pem.EncodeToMemory(b)
		case "EC PRIVATE KEY":
			keyPEM = pem.EncodeToMemory(b)
		case tokenKeyBlock:
			tokenKey = b.Bytes
		default:
			return nil, fmt.Errorf("agent channel material: unexpected PEM block %q", b.Type)
		}
	}
	if certPEM == nil || keyPEM == nil || tokenKey == nil {
		return nil, errors.New("agent channel material: want a certificate, its key and a token key")
	}
	return fromPEM(certPEM, keyPEM, tokenKey)
}

// Equal reports whether m and o are the same material.
func (m *Material) Equal(o *Material) bool {
	return bytes.Equal(m.MarshalPEM(), o.MarshalPEM())
}

// Load reads the channel material from dir as LoadOrCreate left it; nil
// when dir holds none of it. It creates nothing: a daemon of a set that
// finds material of its own uploads it rather than making any.
func Load(dir string) (*Material, error) {
	_, kerr := os.Stat(filepath.Join(dir, hmacFile))
	_, cerr := os.Stat(filepath.Join(dir, certFile))
	if errors.Is(kerr, os.ErrNotExist) && errors.Is(cerr, os.ErrNotExist) {
		return nil, nil
	}
	var (
		files [3][]byte
		errs  []error
	)
	for i, f := range []string{certFile, keyFile, hmacFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		files[i] = b
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("agent channel material in %s: %w", dir, err)
	}
	m, err := fromPEM(files[0], files[1], files[2])
	if err != nil {
		return nil, fmt.Errorf("agent channel material in %s: %w", dir, err)
	}
	return m, nil
}

// LoadOrCreate reads the channel material from dir, creating what is
// missing. A daemon restart reads the same material, so running boxes'
// credentials and pins stay valid and their agents are re-adopted.
func LoadOrCreate(dir string) (*Material, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent channel dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent channel dir: %w", err)
	}
	key, err := readOrCreate(filepath.Join(dir, hmacFile), func() ([]byte, error) {
		k := make([]byte, 32)
		_, err := rand.Read(k)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("agent channel token key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("agent channel token key %s: %d bytes, want 32", filepath.Join(dir, hmacFile), len(key))
	}
	certPath, keyPath := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if errors.Is(cerr, os.ErrNotExist) || errors.Is(kerr, os.ErrNotExist) {
		certPEM, keyPEM, err = newCert()
		if err != nil {
			return nil, err
		}
		// The key first: a cert without its key is useless, a key
		// without its cert is remade.
		if err := writeFile(keyPath, keyPEM); err != nil {
			return nil, err
		}
		if err := writeFile(certPath, certPEM); err != nil {
			return nil, err
		}
	} else if cerr != nil || kerr != nil {
		return nil, fmt.Errorf("agent channel certificate: %w", errors.Join(cerr, kerr))
	}
	m, err := fromPEM(certPEM, keyPEM, key)
	if err != nil {
		return nil, fmt.Errorf("agent channel material in %s: %w", dir, err)
	}
	return m, nil
}

func readOrCreate(path string, gen func() ([]byte, error)) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		return data, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	data, err = gen()
	if err != nil {
		return nil, err
	}
	return data, writeFile(path, data)
}

// writeFile writes path atomically with mode 0600.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newCert() (certPEM, keyPEM []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("agent channel key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("agent channel serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: ServerName},
		DNSNames:     []string{ServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// A leaf that is its own (pinned) root.
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, nil, fmt.Errorf("agent channel certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("agent channel key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// ServerConfig is the daemon listener's TLS config: TLS 1.3 only.
func (m *Material) ServerConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.Cert},
		MinVersion:   tls.VersionTLS13,
	}
}

// ClientConfig is the agent's TLS config: it trusts exactly the daemon's
// certificate in certPEM (no system roots) under ServerName, whatever
// address it dialled.
func ClientConfig(certPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		return nil, errors.New("agent channel: no certificate in the pinned PEM")
	}
	return &tls.Config{
		RootCAs:    pool,
		ServerName: ServerName,
		MinVersion: tls.VersionTLS13,
	}, nil
}
