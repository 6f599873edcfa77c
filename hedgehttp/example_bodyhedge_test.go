package hedgehttp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
)

// A large download whose body stops half-way: the Transport asks for the
// rest with "Range: bytes=N-", pinned to the ETag, and the reader goes
// on from that answer. The server here stalls its first answer until the
// request ends.
func ExampleWithBodyHedge() {
	object := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var first atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v1"`)
		if r.Header.Get("Range") == "" && first.CompareAndSwap(false, true) {
			w.Header().Set("Accept-Ranges", "bytes")
			w.Header().Set("Content-Length", fmt.Sprint(len(object)))
			w.Write(object[:len(object)/2])
			http.NewResponseController(w).Flush()
			<-r.Context().Done() // stalled
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(object))
	}))
	defer srv.Close()

	tr := hedgehttp.NewTransport(nil, nil, hedgehttp.WithBodyHedge(hedgehttp.BodyHedge{MaxStall: 50 * time.Millisecond}))
	client := &http.Client{Transport: tr}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(len(body), bytes.Equal(body, object), err)
	fmt.Println("Range hedges won:", tr.BodyStats().Won)
	// Output:
	// 1048576 true <nil>
	// Range hedges won: 1
}
