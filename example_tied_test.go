package tailcut_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tailcut/tailcut"
)

// Tied requests through Do: each attempt reports, as soon as its server
// says so, that the server has started executing it. The first answer
// that followed such a report ties the key; from then on a twin goes only
// if no attempt has started a millisecond after the primary, and the
// first to start cancels the other.
func ExampleTied() {
	tied, err := tailcut.NewTied(time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	h := tailcut.Hedger[string]{Tied: tied}
	call := func(ctx context.Context, a tailcut.Attempt) (string, error) {
		// ... the request waits in the server's queue; the server's
		// start signal arrives (hedgehttp: a 103 with Tailcut-Started):
		tailcut.AttemptStarted(ctx)
		// ... the server works, and answers.
		return "answer", nil
	}
	for range 2 {
		v, err := h.Do(context.Background(), "db:query", call)
		fmt.Println(v, err)
	}
	fmt.Println("tied requests:", tied.Stats().Requests)
	// Output:
	// answer <nil>
	// answer <nil>
	// tied requests: 1
}
