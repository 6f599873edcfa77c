package hedgehttp

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
)

// ignoresCancel is a base transport whose primary ignores its context (a
// middleware that blocks without it): the primary returns only after hold,
// cancelled or not, and then closes returned. Hedges go to next.
type ignoresCancel struct {
	next     http.RoundTripper
	hold     time.Duration
	returned chan struct{}
}

func (b *ignoresCancel) RoundTrip(r *http.Request) (*http.Response, error) {
	if k, _ := strconv.Atoi(r.Header.Get(AttemptHeader)); k > 0 {
		return b.next.RoundTrip(r)
	}
	defer close(b.returned)
	<-time.After(b.hold)
	return b.next.RoundTrip(r)
}

// A hedge that wins reaches the caller at once, even when the cancelled
// primary's base transport takes 300 ms to return: over a base not known to
// honour cancellation the primary runs on a goroutine of its own. Forced
// inline, the caller waits for the primary, as documented.
func TestHedgeWinsOverAPrimaryThatIgnoresCancellation(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		opts     []Option
		honours  int // 1: the base says it honours cancellation, -1: it says not; 0: silent
		wantTook time.Duration
	}{
		{"by the base's type", nil, 0, 13 * ms},
		{"WithInlinePrimary(false)", []Option{WithInlinePrimary(false)}, 0, 13 * ms},
		{"WithInlinePrimary(true)", []Option{WithInlinePrimary(true)}, 0, 300 * ms},
		{"a base that says it does not honour cancellation", nil, -1, 13 * ms},
		// Trusted: the caller waits for the primary, as inline.
		{"a base that says it honours cancellation", nil, 1, 300 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeRT{headers: func(k int) time.Duration { return 3 * ms }}
				base := &ignoresCancel{next: f, hold: 300 * ms, returned: make(chan struct{})}
				var rt http.RoundTripper = base
				if tt.honours != 0 {
					rt = honours{base, tt.honours > 0}
				}
				tr := NewTransport(rt, fixedPolicy(t, 10*ms), tt.opts...)
				t0 := time.Now()
				resp, err := fakeGet(t, tr, t.Context())
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(t0)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "attempt 1" {
					t.Errorf("body %q, want the hedge's", b)
				}
				if took != tt.wantTook {
					t.Errorf("answer after %v, want %v", took, tt.wantTook)
				}
				<-base.returned
				synctest.Wait()
				if n, open := f.allClosed(); open != 0 {
					t.Errorf("%d of %d response bodies left open", open, n)
				}
			})
		})
	}
}

// The primary runs inline only over a base known to return when cancelled,
// unless WithInlinePrimary says otherwise.
func TestInlinePrimaryByBase(t *testing.T) {
	custom := roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, io.EOF })
	tests := []struct {
		name string
		base http.RoundTripper
		opts []Option
		want bool
	}{
		{"nil (http.DefaultTransport)", nil, nil, true},
		{"*http.Transport", &http.Transport{}, nil, true},
		//lint:ignore SA1019 callers still hand x/net's Transport to NewTransport; it must be recognised
		{"x/net *http2.Transport", &http2.Transport{}, nil, true}, //nolint:staticcheck // as the line above says
		{"a custom RoundTripper", custom, nil, false},
		{"a Transport over *http.Transport", NewTransport(&http.Transport{}, nil), nil, true},
		{"a Transport over a custom RoundTripper", NewTransport(custom, nil), nil, true},
		{"a Transport forced inline over a custom RoundTripper", NewTransport(custom, nil, WithInlinePrimary(true)), nil, false},
		{"a custom RoundTripper, WithInlinePrimary(true)", custom, []Option{WithInlinePrimary(true)}, true},
		{"*http.Transport, WithInlinePrimary(false)", &http.Transport{}, []Option{WithInlinePrimary(false)}, false},
		{"a CancelHonourer that honours", honours{custom, true}, nil, true},
		{"a CancelHonourer that does not", honours{&http.Transport{}, false}, nil, false},
		{"a CancelHonourer that asks its base, an *http.Transport", forwards{&http.Transport{}}, nil, true},
		{"a CancelHonourer that asks its base, a custom RoundTripper", forwards{custom}, nil, false},
		{"a CancelHonourer that honours, WithInlinePrimary(false)", honours{custom, true}, []Option{WithInlinePrimary(false)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewTransport(tt.base, nil, tt.opts...).h.InlinePrimary; got != tt.want {
				t.Errorf("InlinePrimary = %v, want %v", got, tt.want)
			}
		})
	}
}

// honours is a middleware over a RoundTripper that says whether it honours
// cancellation, whatever its base does.
type honours struct {
	http.RoundTripper
	ok bool
}

func (h honours) HonoursCancellation() bool { return h.ok }

// forwards is a middleware that honours cancellation when its base does.
type forwards struct{ http.RoundTripper }

func (f forwards) HonoursCancellation() bool { return HonoursCancellation(f.RoundTripper) }
