package wire

// GatewayUsage is what one sandbox did through one LLM gateway provider.
type GatewayUsage struct {
	Provider string `json:"provider"`
	// Requests were forwarded upstream (whatever the answer).
	Requests int64 `json:"requests"`
	// Rejected were refused by a budget or the rate limit, never forwarded.
	Rejected int64 `json:"rejected"`
	// Errors are forwarded requests that got no answer from the upstream
	// (unreachable, timed out, cut off).
	Errors int64 `json:"errors"`
	// BytesIn were sent upstream (request bodies), BytesOut came back.
	BytesIn  int64 `json:"bytesIn"`
	BytesOut int64 `json:"bytesOut"`
	// Token usage as the upstream reported it (JSON "usage" fields and the
	// usage events of streamed answers).
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	TotalTokens  int64 `json:"totalTokens"`
	// ReservedTokens are held of the token budget by the calls in flight
	// (their input estimate and max_tokens) until they end.
	ReservedTokens int64 `json:"reservedTokens,omitempty"`
	// Budget is the provider's per-sandbox limits; zero is unlimited.
	Budget GatewayBudget `json:"budget"`
}

// GatewayBudget is a provider's per-sandbox limits.
type GatewayBudget struct {
	Requests      int64 `json:"requests,omitempty"`
	Tokens        int64 `json:"tokens,omitempty"`
	RatePerMinute int64 `json:"ratePerMinute,omitempty"`
}

// SandboxUsage is the body of GET /v1/sandboxes/{id}/usage.
type SandboxUsage struct {
	SandboxID string         `json:"sandboxId"`
	Providers []GatewayUsage `json:"providers"`
}

// GatewayCredential is a sandbox's new token for one provider, the
// answer of POST /v1/sandboxes/{id}/gateway/{provider}/rotate.
type GatewayCredential struct {
	Provider string `json:"provider"`
	// Token replaces the one in the sandbox's env, which no longer works.
	Token string `json:"token"`
	// BaseURL is the provider's URL inside the sandbox.
	BaseURL string `json:"baseUrl"`
	// TokenFile is where the new token was written inside the sandbox;
	// empty when the sandbox was not running.
	TokenFile string `json:"tokenFile,omitempty"`
}

// GatewayProvider is a configured provider as the API shows it (never its key).
type GatewayProvider struct {
	Name    string        `json:"name"`
	Kind    string        `json:"kind"`
	BaseURL string        `json:"baseUrl"`
	Budget  GatewayBudget `json:"budget"`
}

// GatewayProviderList is the body of GET /v1/gateway/providers.
type GatewayProviderList struct {
	Providers []GatewayProvider `json:"providers"`
}

// GatewayReload is what a reload of the LLM gateway's keys did: the
// providers whose key changed and those whose key is the same, and the
// changes to the provider config that only a restart applies.
type GatewayReload struct {
	Changed      []string `json:"changed"`
	Unchanged    []string `json:"unchanged"`
	NeedsRestart []string `json:"needsRestart,omitempty"`
}
