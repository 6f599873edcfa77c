package proxy_test

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tailcut/tailcut/proxy"
)

// A proxy in front of two replicas, served in process: what `tailcut proxy
// --config FILE` runs, minus the listeners and signals.
func Example() {
	replica := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s (Hedge-Attempt %s)", r.URL.Path, r.Header.Get("Hedge-Attempt"))
		}))
	}
	a, b := replica("a"), replica("b")
	defer a.Close()
	defer b.Close()

	cfg, err := proxy.Parse("tailcut.yaml", []byte(fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:8080"}]
upstreams:
  - name: users
    urls: [%q, %q]
routes:
  - name: users
    path_prefix: /users/
    upstream: users
    policy: {quantile: 0.95, budget: 10%%, max_delay: 500ms, warmup_delay: 200ms}
`, a.URL, b.URL)))
	if err != nil {
		log.Fatal(err)
	}
	s, err := proxy.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(s.Handler())
	defer front.Close()

	for _, path := range []string{"/users/42", "/orders/7"} {
		req, _ := http.NewRequest(http.MethodGet, front.URL+path, nil)
		req.Header.Set("Hedge-Attempt", "3") // a client's own value never reaches the upstream
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s → %d %s\n", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	r := s.Debug().Routes[0]
	fmt.Printf("route %s: %d request, %d upstreams\n", r.Name, r.Counts.Requests, len(r.Upstreams))
	// Output:
	// /users/42 → 200 /users/42 (Hedge-Attempt 0)
	// /orders/7 → 404 tailcut proxy: no route for this request
	// route users: 1 request, 2 upstreams
}

// Config errors name the file, the line and the field.
func ExampleParse() {
	_, err := proxy.Parse("tailcut.yaml", []byte(`
listeners: [{listen: "127.0.0.1:8080"}]
upstreams:
  - name: users
    urls: ["http://10.0.0.7:8080"]
routes:
  - name: users
    upstream: user
    policy:
      quantile: 95
`))
	fmt.Println(err)
	// Output:
	// tailcut.yaml:8: routes[0].upstream: no upstream named "user"
	// tailcut.yaml:10: routes[0].policy.quantile: must be in (0, 1), got 95
}
