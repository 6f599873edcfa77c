package hedgehttp

import (
	"log/slog"
	"net/http"
	"time"
)

// Defaults of [IdempotencyOptions].
const (
	// DefaultIdempotencyTTL is how long a stored response is replayed.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultLockTimeout is how long a copy waits for a first run.
	DefaultLockTimeout = 10 * time.Second
	// DefaultLockLease is the lease of a running request's lock.
	DefaultLockLease = 10 * time.Second
	// DefaultMaxStoredResponse is the largest response body stored.
	DefaultMaxStoredResponse = 1 << 20
	// DefaultMaxKeyedBody is the largest request body of a keyed request.
	DefaultMaxKeyedBody = 1 << 20
)

// IdempotencyOptions configures the idempotency middleware. The zero value
// keeps responses 24 h, lets copies wait 10 s, stores responses up to
// 1 MiB, and scopes keys by method and path only.
type IdempotencyOptions struct {
	// TTL is how long a stored response is replayed to requests with its
	// key. Zero means DefaultIdempotencyTTL (24 h). Must not be negative.
	TTL time.Duration

	// LockTimeout is how long a copy that finds its key's first run still
	// going waits for it; past it the copy gets 409 Conflict with
	// Retry-After. The copy's own context bounds the wait too. Zero means
	// DefaultLockTimeout (10 s). Must not be negative.
	LockTimeout time.Duration

	// LockLease is the lease of a running request's lock in the store; it
	// is renewed every LockLease/3 while the handler runs, so it only
	// matters when a server dies mid-run: its keys are then locked (copies
	// get 409) for at most LockLease. Zero means DefaultLockLease (10 s).
	// Must be 0 or at least 30 ms.
	LockLease time.Duration

	// MaxStoredResponse is the largest response body, in bytes, that is
	// stored. A larger response is sent to its client but not stored: its
	// key is only locked while it runs, and a copy that comes after runs
	// the handler again. Zero means DefaultMaxStoredResponse (1 MiB). Must
	// not be negative.
	MaxStoredResponse int64

	// MaxBody is the largest request body, in bytes, of a keyed request:
	// the body is read in full to fingerprint it before the handler runs.
	// A keyed request with a larger body gets 413 Content Too Large. Zero
	// means DefaultMaxKeyedBody (1 MiB). Must not be negative.
	MaxBody int64

	// Scope, if set, returns the caller's scope (a tenant, an API key's
	// account): keys of different scopes never meet. It is called for
	// every keyed request; derive it from authenticated data, not from a
	// header the caller can choose freely. Nil means one scope for all.
	Scope func(r *http.Request) string

	// Methods are the methods whose keyed requests are made idempotent.
	// Nil means POST, PUT, PATCH and DELETE; safe methods are served as
	// they come, key or not.
	Methods []string

	// RetryAfter is the pause asked, in Retry-After (whole seconds, rounded
	// up), of a request refused with 409 (its first run still going) or 503
	// (the store cannot be reached). Zero means DefaultRetryAfter (1 s).
	// Must not be negative.
	RetryAfter time.Duration

	// Logger receives one line when the store starts failing and one when
	// it recovers, and a line for each response that could not be stored.
	// Nil means slog.Default().
	Logger *slog.Logger
}
