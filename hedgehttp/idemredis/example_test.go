package idemredis_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgehttp/idemredis"
)

// A server whose keyed writes run once across a fleet: every instance
// wraps its handler in the idempotency middleware over the same Redis.
// (miniredis stands in for Redis here.)
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()

	store, err := idemredis.Config{Addrs: []string{mr.Addr()}}.Open()
	if err != nil {
		panic(err)
	}
	defer store.Close()

	orders := 0
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders)
	})
	h, err := hedgehttp.NewIdempotent(create, store, hedgehttp.IdempotencyOptions{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 2 { // a request and its retry (or hedge)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", "7f9c2ba4")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s (replayed: %q)\n", resp.StatusCode, body, resp.Header.Get(hedgehttp.ReplayedHeader))
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 order 1 (replayed: "")
	// 201 order 1 (replayed: "true")
	// orders created: 1
}
