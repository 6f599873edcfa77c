package hedgehttp

import (
	"net/http"

	"github.com/tailcut/tailcut"
)

// PolicyOf returns the policy that client's requests are hedged under,
// for its statistics ([tailcut.Policy.Stats]) and exporters
// (hedgeprom.NewCollector): that of client.Transport when it is a
// [*Transport] — as in the one-line client
// &http.Client{Transport: NewTransport(nil, nil)} — or any RoundTripper
// with a Policy() *tailcut.Policy method. It returns nil for a client
// that does not hedge (a nil client is http.DefaultClient).
func PolicyOf(client *http.Client) *tailcut.Policy {
	if client == nil {
		client = http.DefaultClient
	}
	if t, ok := client.Transport.(interface{ Policy() *tailcut.Policy }); ok {
		return t.Policy()
	}
	return nil
}
