package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// graceRT answers the primary once the hedge has arrived, and holds the
// hedge until its request's context ends, noting when and its deadline.
type graceRT struct {
	hedgeIn  chan struct{}
	cut      time.Time
	deadline time.Time
	done     chan struct{}
}

func (g *graceRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if k, _ := strconv.Atoi(r.Header.Get(AttemptHeader)); k == 0 {
		<-g.hedgeIn
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("primary")), Request: r, ContentLength: 7}, nil
	}
	g.deadline, _ = r.Context().Deadline()
	close(g.hedgeIn)
	<-r.Context().Done()
	g.cut = time.Now()
	close(g.done)
	return nil, r.Context().Err()
}

// Under WithLoserGrace, a losing hedge keeps the call's deadline and its
// grace ends as soon as the caller's context ends, even after the caller
// has its answer.
func TestLoserGraceEndsWithTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &graceRT{hedgeIn: make(chan struct{}), done: make(chan struct{})}
		tr := NewTransport(g, fixedPolicy(t, 100*time.Millisecond), WithLoserGrace(time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		deadline, _ := ctx.Deadline()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond) // virtual: the loser is in its grace (100 ms)
		cancel()
		cancelled := time.Now()
		<-g.done
		if g.cut != cancelled {
			t.Errorf("the loser ran %v after the caller's context ended, want 0", g.cut.Sub(cancelled))
		}
		if !g.deadline.Equal(deadline) {
			t.Errorf("the loser's deadline is %v, want the caller's %v", g.deadline, deadline)
		}
	})
}
