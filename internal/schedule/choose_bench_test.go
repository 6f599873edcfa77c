package schedule

import (
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// BenchmarkAutoKeepRegime is what keeping the regime adds to a
// recomputation at most: on the trimodal distribution, a choice of the
// other regime than the incumbent's, which is refitted and compared at
// the served level. The budget is the policy's default, windowed, having
// seen the distribution's 20,000 requests.
func BenchmarkAutoKeepRegime(b *testing.B) {
	w, _ := budget.NewWindowed(0, 0, 0)
	est, now := learnAt(b, trimodal(0.112), 20_000)
	for i := range 20_000 {
		w.Deposit(now.Add(time.Duration(i-20_000) * time.Millisecond))
	}
	dist, _ := est.Distribution(now)
	p := params(w, 2)
	ch := p.Choose(dist, p.Target)
	inc := ch
	inc.Delay, inc.level = 121*time.Millisecond, 320*time.Millisecond
	b.ReportAllocs()
	for b.Loop() {
		p.keepRegime(dist, ch, &inc)
	}
}
