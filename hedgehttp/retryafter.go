package hedgehttp

import (
	"net/http"
	"strings"
	"time"
)

// ParseRetryAfter parses the value of a Retry-After header (RFC 9110,
// section 10.2.3) received at now and returns how long the server asked the
// client to wait. Both forms are accepted: delay-seconds ("120") and an
// HTTP-date ("Fri, 31 Dec 1999 23:59:59 GMT", or the obsolete RFC 850 and
// asctime forms). A date in the past gives 0. The result is capped at
// [MaxPushback]. ok is false for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if c := v[0]; c >= '0' && c <= '9' {
		// delay-seconds = 1*DIGIT. Leading zeros are allowed; a value too
		// large to represent is simply "very long", i.e. the cap.
		var secs int64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs <= int64(MaxPushback/time.Second) {
				secs = secs*10 + int64(c-'0')
			}
		}
		return min(time.Duration(secs)*time.Second, MaxPushback), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now)
	if d < 0 {
		d = 0
	}
	return min(d, MaxPushback), true
}
