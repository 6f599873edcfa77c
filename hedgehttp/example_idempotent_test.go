package hedgehttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// A handler that creates orders, made idempotent: the same Idempotency-Key
// and body get the first answer again, marked Idempotent-Replayed; the
// same key with another query or body is refused with 422.
func ExampleNewIdempotent() {
	var orders atomic.Int64
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders.Add(1))
	})
	// nil: a MemoryStore with default options (64 MiB, responses kept 24 h).
	h, err := hedgehttp.NewIdempotent(create, nil, hedgehttp.IdempotencyOptions{})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnprocessableEntity {
			b = []byte(resp.Header.Get("Content-Type"))
		}
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed"))
	}
	send(`{"item":"book"}`)
	send(`{"item":"book"}`) // a retry, or a hedge: the same answer
	send(`{"item":"lamp"}`) // the key reused for something else
	fmt.Println("orders created:", orders.Load())
	// Output:
	// 201 order 1 replayed=""
	// 201 order 1 replayed="true"
	// 422 application/problem+json replayed=""
	// orders created: 1
}

// A hedged write: the client's Transport hedges a slow keyed POST, the
// hedge reaches the server while the primary still runs there, waits for
// it, and gets its answer. The order is created once and the client has
// its answer as soon as the primary's is ready. With several servers, give
// them one shared store (package hedgehttp/idemredis).
func ExampleIdempotent_hedgedWrite() {
	var orders atomic.Int64
	hedgeIn := make(chan struct{}) // closed when the hedge reaches the server
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a slow write: it ends once the hedge has come
		case <-hedgeIn:
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders.Add(1))
	})
	idem, err := hedgehttp.NewIdempotent(create, nil, hedgehttp.IdempotencyOptions{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := hedgehttp.NewHandler(idem, hedgehttp.HandlerOptions{}) // outside: sheds hedges before they reach the store
	if err != nil {
		log.Fatal(err)
	}
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(hedgehttp.AttemptHeader) == "1" {
			once.Do(func() { close(hedgeIn) })
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	p, err := tailcut.New(tailcut.Config{WarmupDelay: 10 * time.Millisecond}) // hedge after 10 ms
	if err != nil {
		log.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: hedgehttp.NewTransport(tr, p)}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
	req.Header.Set("Idempotency-Key", "order-book-1")
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(b))
	srv.Close()
	fmt.Println("orders created:", orders.Load())
	// Output:
	// 201 order 1
	// orders created: 1
}

// A handler that forwards writes and loses the answer of one after sending
// it (here: its upstream timed out) marks the outcome unknown: the key
// keeps the 504 instead of running the write again on the client's retry.
func ExampleMarkOutcomeUnknown() {
	var sent atomic.Int64
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1) // the write left for the upstream...
		// ...and no answer came back in time: it may have been applied.
		hedgehttp.MarkOutcomeUnknown(r.Context())
		http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
	})
	idem, err := hedgehttp.NewIdempotent(forward, nil, hedgehttp.IdempotencyOptions{})
	if err != nil {
		panic(err)
	}
	defer idem.Close()
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":10}`))
		r.Header.Set(hedgehttp.IdempotencyKeyHeader, "transfer-1")
		w := httptest.NewRecorder()
		idem.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get(hedgehttp.ReplayedHeader) == "true")
	}
	fmt.Println("sent upstream:", sent.Load())
	// Output:
	// 504 false
	// 504 true
	// sent upstream: 1
}

// A proxy made idempotent forwards keyed writes through SendOnce: net/http
// would otherwise send a keyed DELETE (or any keyed request without a
// body) a second time by itself when the upstream's reused connection
// fails, and the upstream would run it twice.
func ExampleSendOnce() {
	var deletes atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deletes.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = hedgehttp.SendOnce(nil) // nil: http.DefaultTransport
	h, err := hedgehttp.NewIdempotent(rp, nil, hedgehttp.IdempotencyOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 2 { // a retry gets the stored answer
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/orders/42", nil)
		req.Header.Set("Idempotency-Key", "d1f0c2a4-5b6e-4f7a-8c9d-0e1f2a3b4c5d")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("%d replayed=%q\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("deletes run upstream:", deletes.Load())
	// Output:
	// 204 replayed=""
	// 204 replayed="true"
	// deletes run upstream: 1
}
