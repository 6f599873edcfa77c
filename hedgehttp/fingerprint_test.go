package hedgehttp

import (
	"crypto/sha256"
	"testing"
)

// A keyed request without a query has the fingerprint of its body alone,
// the SHA-256 that keys stored by releases without query fingerprints
// carry: a retry after an upgrade, or a hedge handled by an older replica
// sharing the store, matches instead of getting 422. A query changes it.
func TestFingerprintWithoutQueryIsTheBodys(t *testing.T) {
	body := []byte(`{"amount":10}`)
	if got, want := fingerprint("", body), Fingerprint(sha256.Sum256(body)); got != want {
		t.Errorf("fingerprint(\"\", body) = %x, want sha256(body) %x", got, want)
	}
	if got, want := fingerprint("", nil), Fingerprint(sha256.Sum256(nil)); got != want {
		t.Errorf("fingerprint(\"\", nil) = %x, want sha256 of nothing %x", got, want)
	}
	a, b := fingerprint("x=1", body), fingerprint("x=2", body)
	if a == b || a == fingerprint("", body) {
		t.Errorf("the query does not change the fingerprint: %x, %x", a, b)
	}
}
