package idemredis

import (
	"bytes"
	"testing"

	"github.com/tailcut/tailcut/hedgehttp"
)

// FuzzDecodeHeld reads arbitrary key values as Begin does: it never
// panics, a lock's fingerprint is the 32 bytes after its tag, and a record
// it accepts encodes back to the same bytes.
func FuzzDecodeHeld(f *testing.F) {
	rec := record()
	f.Add("R" + string(rec.Encode()))
	f.Add("L" + string(bytes.Repeat([]byte{7}, 32)) + "token")
	f.Add("L")
	f.Add("R")
	f.Add("")
	f.Add("x")
	f.Fuzz(func(t *testing.T, v string) {
		c, err := decodeHeld(v)
		if err != nil {
			if c.State != 0 {
				t.Fatalf("error %v with state %v", err, c.State)
			}
			return
		}
		switch c.State {
		case hedgehttp.ClaimInProgress:
			if v[0] != tagLock || string(c.Fingerprint[:]) != v[1:1+fpLen] {
				t.Fatalf("lock %q read as fingerprint %x", v, c.Fingerprint)
			}
		case hedgehttp.ClaimCompleted:
			if v[0] != tagRecord || string(c.Record.Encode()) != v[1:] {
				t.Fatalf("record %q does not encode back", v)
			}
		default:
			t.Fatalf("state %v for %q", c.State, v)
		}
	})
}
