package hedgehttp_test

import (
	"net/http"
	"testing"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// TestPolicyOf: the policy of a hedging client, given or defaulted; nil
// for a client that does not hedge.
func TestPolicyOf(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := hedgehttp.PolicyOf(&http.Client{Transport: hedgehttp.NewTransport(nil, p)}); got != p {
		t.Errorf("PolicyOf = %p, want the transport's %p", got, p)
	}
	tr := hedgehttp.NewTransport(nil, nil)
	if got := hedgehttp.PolicyOf(&http.Client{Transport: tr}); got == nil || got != tr.Policy() {
		t.Errorf("PolicyOf of the one-line client = %p, want its default policy %p", got, tr.Policy())
	}
	for _, c := range []*http.Client{nil, {}, {Transport: http.DefaultTransport}} {
		if got := hedgehttp.PolicyOf(c); got != nil {
			t.Errorf("PolicyOf(%v) = %p, want nil", c, got)
		}
	}
}
