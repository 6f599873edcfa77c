package hedgehttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
)

// Tied requests: the server executes at most four requests at once and
// tells the client, with a 103 carrying Tailcut-Started, when each one
// starts; the client sends a request's twin only if the request has not
// started 50 ms after it was sent, and cancels whichever copy is still
// queued when the other starts. The first answer ties the key: from the
// second request on, the client knows this server sends the signal.
func ExampleNewAdmission() {
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
	adm, err := hedgehttp.NewAdmission(app, hedgehttp.AdmissionOptions{Limit: 4})
	if err != nil {
		log.Fatal(err)
	}
	h, err := hedgehttp.NewHandler(adm, hedgehttp.HandlerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	tr := hedgehttp.NewTransport(nil, nil, hedgehttp.WithTied(50*time.Millisecond))
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for range 2 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(string(b))
	}
	fmt.Println("tied requests:", tr.Tied().Stats().Requests)
	// Output:
	// hello
	// hello
	// tied requests: 1
}
