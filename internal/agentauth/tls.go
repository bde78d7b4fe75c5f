package agentauth

import (
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
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("agent channel certificate %s: %w", certPath, err)
	}
	return &Material{Cert: cert, CertPEM: certPEM, TokenKey: key}, nil
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
