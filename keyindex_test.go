package tailcut

import (
	"maps"
	"strconv"
	"sync"
	"testing"

	"github.com/tailcut/tailcut/internal/key"
)

// TestKeyIndex: the index finds every key put and not removed, none
// other, through the tables that replace each other as it fills up, and
// a lookup racing the writers finds a key it holds or nothing (run with
// -race).
func TestKeyIndex(t *testing.T) {
	var x keyIndex
	x.init()
	keys := map[string]*keyState{}
	var set key.Settings
	state := func(name string) *keyState {
		ks := new(keyState)
		ks.Init(name, nil, &set)
		return ks
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := range 50 {
				name := "k" + strconv.Itoa(i)
				if ks := x.get(name); ks != nil && ks.Name() != name {
					t.Errorf("get(%q) found %q", name, ks.Name())
				}
			}
		}
	}()
	for i := range 1000 {
		name := "k" + strconv.Itoa(i)
		ks := state(name)
		x.put(ks, maps.Values(keys))
		keys[name] = ks
		if i%3 == 0 { // remove an older key now and then
			old := "k" + strconv.Itoa(i/2)
			if o := keys[old]; o != nil {
				x.remove(o)
				delete(keys, old)
			}
		}
	}
	close(stop)
	wg.Wait()
	for i := range 1000 {
		name := "k" + strconv.Itoa(i)
		got, want := x.get(name), keys[name]
		if got != want {
			t.Errorf("get(%q) = %p, want %p", name, got, want)
		}
	}
	if x.get("absent") != nil {
		t.Error("found a key never put")
	}
}
