package hedgehttp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Store keeps the state of idempotency keys for the idempotency middleware
// ([Idempotent]): which keys are being run now (a lock with a lease) and
// the responses of the runs that finished (a [Record] with a TTL). Two
// implementations come with tailcut: [MemoryStore] (one process, the
// default) and a Redis store in package hedgehttp/idemredis (a fleet of
// servers sharing keys).
//
// Keys are chosen by the middleware: 64 lower-case hex digits (a SHA-256 of
// the Idempotency-Key header, the method, the path and the caller's scope),
// so a store may use them as they are, inside a Redis Cluster hash tag or
// as a file name. One key holds at most one thing at a time: nothing, a
// lock or a record.
//
// The protocol, for one request carrying an Idempotency-Key:
//
//  1. The middleware calls Begin with a fresh random token. If the key
//     holds nothing (or a lock whose lease has passed, or a record whose TTL
//     has passed) the store sets the lock and answers [ClaimAcquired]: this
//     request runs the handler. Setting the lock is atomic: of any number
//     of concurrent Begin calls on one key, across every process sharing
//     the store, exactly one acquires it.
//  2. While the handler runs, the middleware calls Extend every Lease/3 so
//     that a long run keeps its lock; a lock that is not extended disappears
//     at the end of its lease, so a server that crashes mid-run frees its
//     keys by itself.
//  3. When the handler has answered with a response worth keeping, the
//     middleware calls Complete: the store replaces the lock by the record,
//     atomically and only if the lock is still held by this token (or the
//     key holds nothing: the lock's lease passed and no one took it), and
//     keeps the record for ttl. If the store cannot be asked, the
//     middleware keeps the key locked in its own process and calls
//     Complete again, with backoff, extending the lease, until the store
//     answers or the TTL passes. Any other outcome (a 5xx, a panic, a run
//     abandoned because its client went away, a response too large to
//     keep) ends in Release, which deletes the lock if this token still
//     holds it, so the key is not poisoned: the next copy runs again.
//
// A request that finds the key locked by another ([ClaimInProgress]) waits:
// the middleware calls Begin again (with the same token) after a backoff
// (a few milliseconds, doubling up to 100 ms), until the answer changes,
// its own context ends, or the middleware's lock timeout passes (it then
// answers 409 Conflict with Retry-After). A store that can tell when a lock
// ends sets [Claim.Wake] so that waiters call Begin again at once instead
// of at their next poll; polling remains the fallback, so Wake is an
// optimisation, never a requirement.
//
// Errors: Extend and Release return [ErrLockLost] when the token does not
// hold the key (its lease passed, or it was never taken), Complete when
// another request's lock or record holds it. Any other error means the
// store could not be asked (network, timeout, server down); the middleware
// then fails closed — a keyed request whose Begin fails is refused with
// 503 and Retry-After rather than run without the guarantee, a response
// whose Complete fails is kept and stored again later — and logs the
// episode once. A store must not retry an
// operation whose effect it cannot know (a Begin that may have set the lock)
// and then report failure: the lock would be left to its lease, which is
// safe (copies get 409 until it ends), while reporting success would not be.
//
// Records returned by Begin are shared: neither the store nor the caller
// may change them after Complete. Methods are called concurrently and must
// be safe for concurrent use; ctx bounds the call.
type Store interface {
	// Begin acquires key for the request described by lock, or tells what
	// the key holds. See [Claim] for the three answers. lock.Lease (> 0)
	// is how long the lock lives unless extended; lock.Token and
	// lock.Fingerprint are kept with it, and the fingerprint is returned
	// to the other requests that find the key locked.
	Begin(ctx context.Context, key string, lock Lock) (Claim, error)

	// Extend sets the lease of the lock held by lock.Token on key to
	// lock.Lease from now. It returns ErrLockLost if the token does not
	// hold the key.
	Extend(ctx context.Context, key string, lock Lock) error

	// Complete replaces the lock held by token on key with rec, kept for
	// ttl (> 0) from now, atomically; a key that holds nothing (the lock's
	// lease passed, no one took it) gets rec too. A key that already holds
	// rec (the same encoding: a Complete retried after it took effect)
	// answers nil and is left as it is. It returns ErrLockLost, and stores
	// nothing, if the key holds another request's lock or another record.
	// The store keeps rec as it is (a copy or its encoding): the caller
	// does not change it after.
	Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error

	// Release deletes the lock held by token on key, so that the next
	// request with the key runs. It returns ErrLockLost, and changes
	// nothing, if the token does not hold the key (a record stored by
	// another request is never deleted by Release).
	Release(ctx context.Context, key, token string) error
}

// ErrLockLost is returned by a [Store] when a lock is extended or
// released by a token that does not hold it, or when Complete finds the
// key held by another request's lock or record.
var ErrLockLost = errors.New("hedgehttp: idempotency lock not held")

// Lock describes the lock a request asks for in [Store.Begin] and renews
// in [Store.Extend].
type Lock struct {
	// Token identifies the holder: random, unique per request (about 26
	// characters of base32; a store may rely on at most 64 printable
	// ASCII characters).
	Token string
	// Fingerprint identifies the request's content (query and body); requests
	// that find the key locked compare theirs with it.
	Fingerprint Fingerprint
	// Lease is how long the lock lives from now unless extended again.
	Lease time.Duration
}

// Fingerprint identifies the content of a request: the SHA-256 of its raw
// query and its body. Two copies of one request have the same fingerprint;
// a key reused with another query or body is told apart by it.
type Fingerprint [32]byte

// ClaimState is what a key holds, as answered by [Store.Begin].
type ClaimState uint8

const (
	// ClaimAcquired: the key held nothing (or only expired state); the
	// caller now holds the lock and runs the request.
	ClaimAcquired ClaimState = iota + 1
	// ClaimInProgress: another request holds the lock; Claim.Fingerprint
	// is its fingerprint. A Begin with the holder's own token also
	// answers ClaimInProgress: a lock is acquired once.
	ClaimInProgress
	// ClaimCompleted: the key holds a record, in Claim.Record.
	ClaimCompleted
)

// String returns the state's name, e.g. "acquired".
func (s ClaimState) String() string {
	switch s {
	case ClaimAcquired:
		return "acquired"
	case ClaimInProgress:
		return "in progress"
	case ClaimCompleted:
		return "completed"
	}
	return fmt.Sprintf("ClaimState(%d)", uint8(s))
}

// Claim is the answer of [Store.Begin].
type Claim struct {
	// State is what the key holds; see the constants.
	State ClaimState
	// Fingerprint is the fingerprint of the lock's holder, when State is
	// ClaimInProgress.
	Fingerprint Fingerprint
	// Record is the stored response, when State is ClaimCompleted. It is
	// shared and must not be changed.
	Record *Record
	// Wake, if not nil when State is ClaimInProgress, is closed when the
	// lock ends (completed, released or expired) — or earlier, spuriously.
	// A store that cannot tell leaves it nil; waiters then poll.
	Wake <-chan struct{}
}

// Record is a stored response: what every later copy of the request gets,
// byte for byte.
type Record struct {
	// Status is the response's status code (100–999).
	Status int
	// Header is the response's header as the handler set it when it wrote
	// the status, with canonical names (Date included: the middleware
	// sets it, so that a replay carries the first answer's date).
	Header http.Header
	// Body is the response's body.
	Body []byte
	// Fingerprint is the fingerprint of the request that produced it.
	Fingerprint Fingerprint
}

// recordVersion is the first byte of an encoded Record.
const recordVersion = 1

// Encode returns rec in a compact binary form, for stores that keep bytes
// (Redis); [DecodeRecord] reads it back. The form is versioned and
// deterministic (header names sorted).
func (rec *Record) Encode() []byte {
	return rec.AppendEncode(make([]byte, 0, rec.Size()))
}

// AppendEncode appends the encoding of rec (see [Record.Encode]) to b.
func (rec *Record) AppendEncode(b []byte) []byte {
	b = append(b, recordVersion)
	b = binary.AppendUvarint(b, uint64(rec.Status))
	b = append(b, rec.Fingerprint[:]...)
	names := make([]string, 0, len(rec.Header))
	for name := range rec.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		vs := rec.Header[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return appendString(b, string(rec.Body))
}

// Size returns the length of rec's encoding, which stores may use to
// account for the memory a record takes.
func (rec *Record) Size() int {
	n := 1 + uvarintLen(uint64(rec.Status)) + len(rec.Fingerprint) + uvarintLen(uint64(len(rec.Header)))
	for name, vs := range rec.Header {
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(vs)))
		for _, v := range vs {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n + uvarintLen(uint64(len(rec.Body))) + len(rec.Body)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// DecodeRecord reads a record written by [Record.Encode]. It rejects,
// with an error, anything that Encode would not have written for a valid
// record: another version, a status outside 100–999, a header name that is
// not a canonical HTTP token, names out of order or repeated, a header
// value with a control character other than tab, a number not in its
// shortest form, a truncated input or trailing bytes. So a corrupted or forged store entry can never inject a header line.
// The record's body is a copy: data may be reused after.
func DecodeRecord(data []byte) (*Record, error) {
	d := decoder{b: data}
	if v := d.byte(); d.err == nil && v != recordVersion {
		return nil, fmt.Errorf("hedgehttp: DecodeRecord: unknown version %d", v)
	}
	rec := &Record{}
	status := d.uvarint()
	if d.err == nil && (status < 100 || status > 999) {
		return nil, fmt.Errorf("hedgehttp: DecodeRecord: status %d out of range", status)
	}
	rec.Status = int(status)
	copy(rec.Fingerprint[:], d.bytes(len(rec.Fingerprint)))
	// Each name takes at least 3 bytes (length, one byte, value count), so
	// a count larger than what is left is a lie: refuse before allocating.
	nh := d.count(3)
	if nh > 0 {
		rec.Header = make(http.Header, nh)
	}
	prev := ""
	for i := 0; i < nh && d.err == nil; i++ {
		name := d.string()
		if d.err != nil {
			break
		}
		if !validHeaderName(name) {
			return nil, fmt.Errorf("hedgehttp: DecodeRecord: invalid header name %q", name)
		}
		if i > 0 && name <= prev {
			return nil, fmt.Errorf("hedgehttp: DecodeRecord: header %q twice or out of order", name)
		}
		prev = name
		nv := d.count(1)
		vs := make([]string, 0, nv)
		for j := 0; j < nv && d.err == nil; j++ {
			v := d.string()
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("hedgehttp: DecodeRecord: invalid value for header %q", name)
			}
			vs = append(vs, v)
		}
		rec.Header[name] = vs
	}
	n := d.count(1)
	if body := d.bytes(n); d.err == nil && n > 0 {
		rec.Body = append([]byte(nil), body...)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("hedgehttp: DecodeRecord: %w", d.err)
	}
	return rec, nil
}

// decoder reads an encoded Record; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated record")

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errTruncated
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(x) { // only the shortest form, as Encode writes
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return x
}

// count reads a count of items each taking at least min bytes, and
// rejects one that the remaining input cannot hold.
func (d *decoder) count(min int) int {
	x := d.uvarint()
	if d.err == nil && x > uint64(len(d.b)/min) {
		d.err = fmt.Errorf("count %d exceeds the %d bytes left", x, len(d.b))
		return 0
	}
	return int(x)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = errTruncated
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) string() string {
	return string(d.bytes(d.count(1)))
}

// validHeaderName reports whether s is a non-empty RFC 9110 token in
// canonical form (as http.Header keys are).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return http.CanonicalHeaderKey(s) == s
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// validHeaderValue reports whether s holds no control character other
// than horizontal tab (so no CR, LF or NUL).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
