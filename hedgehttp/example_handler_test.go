package hedgehttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
)

// A server behind hedgehttp.Handler. The handler passes r.Context() down and
// stops when it is done: when a hedging client takes another attempt's
// answer it cancels this one, and only a handler that watches the context
// gives the work back. Here the client gives up after 20 ms on a request
// that would take a second; the handler returns at once, and the Handler
// counts the request as cancelled.
func ExampleNewHandler() {
	returned := make(chan error, 1)
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, _ := hedgehttp.AttemptFromContext(r.Context()) // 0: primary, k ≥ 1: hedge
		select {
		case <-time.After(time.Second): // the real work, e.g. a database query taking ctx
			fmt.Fprintf(w, "done (attempt %d)\n", k)
			returned <- nil
		case <-r.Context().Done():
			// The client went away (or a hedge won): stop working.
			returned <- r.Context().Err()
		}
	})
	h, err := hedgehttp.NewHandler(work, hedgehttp.HandlerOptions{
		HedgeLimit: 100, // past 100 requests in flight, shed hedges (429)
		HardLimit:  200, // past 200, shed primaries too (503)
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header.Set(hedgehttp.AttemptHeader, "1")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	fmt.Println("handler stopped:", <-returned)
	srv.Close() // waits for the handler to return, and so for the Handler's count
	st := h.Stats()
	fmt.Println("hedges served:", st.Hedge.Served, "cancelled:", st.Hedge.Canceled)
	// Output:
	// handler stopped: context canceled
	// hedges served: 1 cancelled: 1
}

// Shedding: with 1 request in flight and a HedgeLimit of 1, a hedge is
// answered 429 with Retry-After, which makes a tailcut client pause its
// hedges; a primary still passes.
func ExampleHandler_shedding() {
	release := make(chan struct{})
	entered := make(chan struct{})
	h, err := hedgehttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}), hedgehttp.HandlerOptions{HedgeLimit: 1, RetryAfter: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.Get(srv.URL + "/slow"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered

	send := func(attempt string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/fast", nil)
		req.Header.Set(hedgehttp.AttemptHeader, attempt)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("attempt %s: %d Retry-After=%q\n", attempt, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	send("1")
	send("0")
	close(release)
	<-done
	// Output:
	// attempt 1: 429 Retry-After="2"
	// attempt 0: 200 Retry-After=""
}
