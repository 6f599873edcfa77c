package hedgehttp

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		v      string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"007", 7 * time.Second, true},
		{"600", MaxPushback, true},
		{"601", MaxPushback, true},
		{"99999999999999999999999999", MaxPushback, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Sunday, 29-Nov-26 20:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Sun Nov 29 20:00:45 2026", 45 * time.Second, true},       // asctime
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Add(24 * time.Hour).Format(http.TimeFormat), MaxPushback, true},
		{"", 0, false},
		{"   ", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"+5", 0, false},
		{"soon", 0, false},
		{"Sun, 29 Nov 2026 25:00:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	for _, s := range []string{"0", "120", "99999999999999999999", "Sun, 29 Nov 2026 20:01:00 GMT",
		"Sunday, 29-Nov-26 20:00:30 GMT", "Sun Nov 29 20:00:45 2026", "", " 5 ", "-1", "1e3", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, now)
		if d < 0 || d > MaxPushback {
			t.Fatalf("ParseRetryAfter(%q) = %v, out of [0, %v]", v, d, MaxPushback)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v with ok false", v, d)
		}
		// Every non-negative integer is accepted as delay-seconds.
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			want := MaxPushback
			if n < uint64(MaxPushback/time.Second) {
				want = time.Duration(n) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, true", v, d, ok, want)
			}
		}
		// An HTTP-date that net/http accepts is accepted.
		if tm, err := http.ParseTime(v); err == nil && !ok {
			t.Fatalf("ParseRetryAfter(%q) rejected the date %v", v, tm)
		}
	})
}
