package tailcut_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// drive runs n requests to key through the decision API by hand, one every
// 10 ms from now: latencies of 1–20 ms, and every tenth primary 50 ms,
// hedged at the key's delay by an attempt that answers in 2 ms. It returns
// the time after the last one.
func drive(p *tailcut.Policy, key string, n int, now time.Time) time.Time {
	for i := range n {
		r := p.Begin(key, now)
		lat := time.Duration(1+i%20) * time.Millisecond
		if i%10 == 9 {
			lat = 50 * time.Millisecond
		}
		if d := r.HedgeAt(1); lat > d && p.Hedge(&r, now.Add(d)) == tailcut.Send {
			end := now.Add(d + 2*time.Millisecond)
			p.Observe(&r, 1, 2*time.Millisecond, tailcut.Completed, end)
			p.Observe(&r, 0, d+2*time.Millisecond, tailcut.Canceled, end)
			p.End(&r, 1, end)
		} else {
			p.Observe(&r, 0, lat, tailcut.Completed, now.Add(lat))
			p.End(&r, 0, now.Add(lat))
		}
		now = now.Add(10 * time.Millisecond)
	}
	return now
}

// TestStatsJSON: the stats encode with names in snake_case, durations in
// milliseconds and states by name, and the p99 is measured outside a dry
// run.
func TestStatsJSON(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{Quantile: 0.95, MaxHedges: 1})
	if err != nil {
		t.Fatal(err)
	}
	drive(p, "db", 200, time.Unix(0, 0))
	s := p.Stats()
	k := s.Keys[0]
	if k.P99 <= 0 || k.PredictedP99 <= 0 || k.PredictedP99 > k.P99 {
		t.Errorf("p99 %v predicted %v: want both measured, the prediction no higher", k.P99, k.PredictedP99)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Requests       *int64           `json:"requests"`
		Hedges         *int64           `json:"hedges"`
		ExtraLoad      *float64         `json:"extra_load"`
		WinsByAttempt  []int64          `json:"wins_by_attempt"`
		Denied         map[string]int64 `json:"denied"`
		InflightHedges *int64           `json:"inflight_hedges"`
		Keys           []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Requests == nil || *doc.Requests != 200 || doc.Hedges == nil || *doc.Hedges != s.Hedges || doc.ExtraLoad == nil || doc.InflightHedges == nil {
		t.Errorf("totals missing or wrong: %s", b)
	}
	if len(doc.WinsByAttempt) != tailcut.MaxHedgesLimit+1 || doc.WinsByAttempt[1] != s.Wins[1] {
		t.Errorf("wins_by_attempt = %v, want %v", doc.WinsByAttempt, s.Wins)
	}
	if _, ok := doc.Denied["budget"]; !ok || len(doc.Denied) != tailcut.NumDecisions-2 {
		t.Errorf("denied = %v, want every denial by name", doc.Denied)
	}
	if len(doc.Keys) != 1 {
		t.Fatalf("keys: %s", b)
	}
	key := doc.Keys[0]
	want := map[string]any{
		"key": "db", "requests": 200.0, "breaker": "closed", "diagnosis": k.Diagnosis.String(),
		"delay_ms": float64(k.Delay) / 1e6, "p99_ms": float64(k.P99) / 1e6, "predicted_p99_ms": float64(k.PredictedP99) / 1e6,
		"delay_source": "quantile", "warm": true, "pinned": false,
	}
	for name, v := range want {
		if key[name] != v {
			t.Errorf("keys[0].%s = %v, want %v", name, key[name], v)
		}
	}
	if _, ok := key["auto"]; ok {
		t.Errorf("keys[0].auto present with a pinned quantile: %s", b)
	}
	for name := range key {
		if strings.ToLower(name) != name || strings.Contains(name, " ") {
			t.Errorf("field %q is not snake_case", name)
		}
	}
}

func TestStatsString(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{Quantile: 0.95, MaxHedges: 1})
	if err != nil {
		t.Fatal(err)
	}
	drive(p, "db", 200, time.Unix(0, 0))
	s := p.Stats()
	k := s.Keys[0]
	if k.Delay < 10*time.Millisecond || k.Delay >= 100*time.Millisecond {
		t.Fatalf("delay %v: the expected text below assumes two digits of milliseconds", k.Delay)
	}
	text := s.String()
	for _, want := range []string{
		fmt.Sprintf("tailcut: 200 requests, %d hedges (", s.Hedges),
		fmt.Sprintf("\n  \"db\": delay %v (quantile), p99 %v; breaker closed", k.Delay.Round(100*time.Microsecond), k.P99.Round(100*time.Microsecond)),
		"breaker closed",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Stats.String() lacks %q:\n%s", want, text)
		}
	}
	if got := fmt.Sprintf("%+v", s); got != text {
		t.Errorf("%%+v = %q, want String()'s %q", got, text)
	}
	if strings.Contains(text, "[0 ") || strings.Contains(text, "0x") {
		t.Errorf("raw arrays or pointers in %q", text)
	}
	for v, want := range map[fmt.Stringer]string{
		tailcut.Completed: "completed", tailcut.Failed: "failed", tailcut.Canceled: "canceled",
		tailcut.Errored: "errored", tailcut.Abandoned: "abandoned",
		tailcut.Success: "success", tailcut.Fatal: "fatal", tailcut.Retryable: "retryable", tailcut.ServerError: "server_error",
	} {
		if v.String() != want {
			t.Errorf("%#v.String() = %q, want %q", v, v.String(), want)
		}
	}
}

func TestHandler(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	drive(p, "db", 50, time.Unix(0, 0))
	h := tailcut.Handler(p)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/tailcut", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var doc struct {
		Requests int64 `json:"requests"`
		Keys     []struct {
			Key         string `json:"key"`
			DelaySource string `json:"delay_source"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Requests != 50 || len(doc.Keys) != 1 || doc.Keys[0].Key != "db" || doc.Keys[0].DelaySource != "auto" {
		t.Errorf("JSON %+v (%v):\n%s", doc, err, rec.Body)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/tailcut?format=text", nil))
	if got, want := rec.Body.String(), p.Stats().String()+"\n"; got != want {
		t.Errorf("text:\n%s\nwant:\n%s", got, want)
	}
}

func TestAutoChoiceText(t *testing.T) {
	a := tailcut.AutoChoice{Delay: 12 * time.Millisecond, Gap: 8 * time.Millisecond, Hedges: 2, Target: 0.99,
		Unhedged: 45 * time.Millisecond, Hedged: 14 * time.Millisecond, HedgeRate: 0.041, Grant: 1, LaterGrant: 0.9, Reserve: 0.5, Cap: 0.15,
		WinShare: 0.6, HedgesWon: 0.3, HedgesPredicted: 0.6, Correction: 0.5}
	const want = "hedge at 12ms, then every 8ms (2 at most); p99 45ms unhedged, 14ms hedged; 4.1 % of requests hedged; " +
		"hedges won 30.0 % where 60.0 % was predicted: predictions × 0.50"
	if got := a.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"delay_ms":12,"gap_ms":8,"hedges":2,"target":0.99,"unhedged_ms":45,"hedged_ms":14,"hedge_rate":0.041,"grant":1,"later_grant":0.9,"reserve":0.5,"trigger_cap":0.15,"win_share":0.6,"hedges_won":0.3,"hedges_predicted":0.6,"correction":0.5,"description":"` + want + `"}`
	if string(b) != wantJSON {
		t.Errorf("JSON %s\nwant %s", b, wantJSON)
	}
}
