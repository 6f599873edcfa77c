package lab

// Event kinds.
const (
	evArrival  uint8 = iota // open loop: the next request arrives
	evTimer                 // a hedge, retry or re-issue timer of a call
	evWorkDone              // an attempt's work phase ends
	evHoldDone              // an attempt's critical section ends
	evSeries                // record a point of the delay series
	evArrive                // an attempt reaches its server (Config.RTT)
	evDeliver               // an attempt's answer reaches the client (Config.RTT)
	evCapacity              // a batch job takes or frees workers (Scenario.Batch)
	evStarted               // an attempt's start signal reaches the client (Tied, Config.RTT)
)

// event is one scheduled event. Events are values in a slice-backed heap,
// so scheduling allocates nothing once the heap has grown.
type event struct {
	t    int64  // virtual time, ns since the start
	seq  uint64 // tie-breaker: events at the same instant run in order of scheduling
	id   int32  // attempt or call slot
	gen  uint32 // generation of the slot when scheduled; a stale event is dropped
	kind uint8
	k    uint8 // timer: the attempt index it may launch
}

func (a *event) before(b *event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

// eventHeap is a binary min-heap of events ordered by (t, seq).
type eventHeap struct{ ev []event }

func (h *eventHeap) len() int { return len(h.ev) }

func (h *eventHeap) push(e event) {
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].before(&h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev = h.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.ev[r].before(&h.ev[l]) {
			m = r
		}
		if !h.ev[m].before(&h.ev[i]) {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}

// fifo is a queue of slot ids that reuses its backing array.
type fifo struct {
	buf  []int32
	head int
}

func (q *fifo) push(id int32) {
	if q.head > 0 && q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, id)
}

func (q *fifo) pop() (int32, bool) {
	if q.head == len(q.buf) {
		return 0, false
	}
	id := q.buf[q.head]
	q.head++
	return id, true
}
