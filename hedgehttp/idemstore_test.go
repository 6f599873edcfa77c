package hedgehttp

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func sampleRecord() *Record {
	rec := &Record{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Set-Cookie":   {"a=1", "b=2"},
			"Date":         {"Tue, 01 Dec 2026 10:00:00 GMT"},
			"X-Empty":      {""},
		},
		Body: []byte(`{"id":42}`),
	}
	for i := range rec.Fingerprint {
		rec.Fingerprint[i] = byte(i)
	}
	return rec
}

func TestRecordRoundTrip(t *testing.T) {
	for _, rec := range []*Record{
		sampleRecord(),
		{Status: 204},
		{Status: 200, Header: http.Header{}, Body: bytes.Repeat([]byte{0xff}, 70000)},
	} {
		b := rec.Encode()
		if len(b) != rec.Size() {
			t.Errorf("Size() = %d, len(Encode()) = %d", rec.Size(), len(b))
		}
		got, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("DecodeRecord(Encode(%d)): %v", rec.Status, err)
		}
		if got.Status != rec.Status || got.Fingerprint != rec.Fingerprint || !bytes.Equal(got.Body, rec.Body) {
			t.Errorf("round trip: got %d %x %q, want %d %x %q", got.Status, got.Fingerprint, got.Body, rec.Status, rec.Fingerprint, rec.Body)
		}
		if len(rec.Header) > 0 && !reflect.DeepEqual(got.Header, rec.Header) {
			t.Errorf("round trip header: got %v, want %v", got.Header, rec.Header)
		}
		if len(rec.Header) == 0 && len(got.Header) != 0 {
			t.Errorf("round trip header: got %v, want none", got.Header)
		}
		// Deterministic: encoding the decoded record gives the same bytes.
		if again := got.Encode(); !bytes.Equal(again, b) {
			t.Errorf("Encode(Decode(b)) differs from b")
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good := sampleRecord().Encode()
	enc := func(f func(*Record)) []byte {
		r := sampleRecord()
		f(r)
		return r.Encode()
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"version", append([]byte{2}, good[1:]...), "version"},
		{"status low", enc(func(r *Record) { r.Status = 99 }), "status"},
		{"status high", enc(func(r *Record) { r.Status = 1000 }), "status"},
		{"truncated", good[:len(good)-1], "exceeds"},
		{"truncated fingerprint", good[:10], "truncated"},
		{"trailing", append(append([]byte(nil), good...), 0), "trailing"},
		{"header CRLF", enc(func(r *Record) { r.Header["X-A"] = []string{"v\r\nX-Injected: 1"} }), "invalid value"},
		{"header NUL", enc(func(r *Record) { r.Header["X-A"] = []string{"v\x00"} }), "invalid value"},
		{"name space", enc(func(r *Record) { r.Header["X A"] = []string{"v"} }), "invalid header name"},
		{"name not canonical", enc(func(r *Record) { r.Header["x-a"] = []string{"v"} }), "invalid header name"},
		{"name empty", enc(func(r *Record) { r.Header[""] = []string{"v"} }), "invalid header name"},
		{"huge count", func() []byte {
			b := []byte{recordVersion}
			b = binary.AppendUvarint(b, 200)
			b = append(b, make([]byte, 32)...)
			return binary.AppendUvarint(b, 1<<40)
		}(), "exceeds"},
		{"huge body", func() []byte {
			b := []byte{recordVersion}
			b = binary.AppendUvarint(b, 200)
			b = append(b, make([]byte, 32)...)
			b = binary.AppendUvarint(b, 0)
			return binary.AppendUvarint(b, 1<<62)
		}(), "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := DecodeRecord(tt.data)
			if err == nil {
				t.Fatalf("DecodeRecord accepted it: %+v", rec)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "hedgehttp: DecodeRecord: ") {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
	dup := []byte{recordVersion}
	dup = binary.AppendUvarint(dup, 200)
	dup = append(dup, make([]byte, 32)...)
	dup = binary.AppendUvarint(dup, 2)
	for range 2 {
		dup = appendString(dup, "X-A")
		dup = binary.AppendUvarint(dup, 1)
		dup = appendString(dup, "v")
	}
	dup = binary.AppendUvarint(dup, 0)
	if _, err := DecodeRecord(dup); err == nil || !strings.Contains(err.Error(), "twice or out of order") {
		t.Errorf("duplicate header name: err = %v, want one naming it twice", err)
	}
}

func TestDecodeRecordCopiesBody(t *testing.T) {
	b := sampleRecord().Encode()
	rec, err := DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'x'
	}
	if string(rec.Body) != `{"id":42}` {
		t.Errorf("body changed with the input buffer: %q", rec.Body)
	}
}

func TestClaimStateString(t *testing.T) {
	for s, want := range map[ClaimState]string{ClaimAcquired: "acquired", ClaimInProgress: "in progress", ClaimCompleted: "completed", 0: "ClaimState(0)"} {
		if got := s.String(); got != want {
			t.Errorf("ClaimState(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to DecodeRecord: it must not panic
// or allocate beyond its input, and whatever it accepts must be a record
// that net/http can write (valid names and values) and that encodes back
// to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(sampleRecord().Encode())
	f.Add((&Record{Status: 204}).Encode())
	f.Add([]byte{recordVersion, 0xc8, 0x01})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := DecodeRecord(data)
		if err != nil {
			if rec != nil {
				t.Fatalf("record and error both returned")
			}
			return
		}
		if rec.Status < 100 || rec.Status > 999 {
			t.Fatalf("accepted status %d", rec.Status)
		}
		for name, vs := range rec.Header {
			if !validHeaderName(name) {
				t.Fatalf("accepted header name %q", name)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("accepted header value %q", v)
				}
			}
		}
		if again := rec.Encode(); !bytes.Equal(again, data) {
			t.Fatalf("Encode(DecodeRecord(data)) = %x, want %x", again, data)
		}
	})
}
