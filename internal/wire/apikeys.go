package wire

import "time"

// CreateAPIKeyRequest is the body of POST /v1/keys.
type CreateAPIKeyRequest struct {
	Name string `json:"name"`
}

// APIKey describes a named API key, never the key itself.
type APIKey struct {
	Name string `json:"name"`
	// Hint is the key's first characters ("e2b_1a2b3c"), to recognise it.
	Hint      string    `json:"hint"`
	CreatedAt time.Time `json:"createdAt"`
	// LastUsedAt is when the key was last accepted, up to a minute stale;
	// absent if it never was.
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
}

// APIKeyList is the body of GET /v1/keys.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// CreatedAPIKey is the answer to POST /v1/keys: the only time the key is
// shown.
type CreatedAPIKey struct {
	APIKey
	Key string `json:"key"`
}
