package idemtest

import (
	"net/http"
	"testing"
)

func TestAnswerWithoutEqual(t *testing.T) {
	a := Answer{Status: 201, Header: http.Header{"Location": {"/o/1"}, "Replayed": {"true"}}, Body: "b"}
	b := Answer{Status: 201, Header: http.Header{"Location": {"/o/1"}}, Body: "b"}
	if a.Equal(b) {
		t.Error("answers with different headers are Equal")
	}
	if w := a.Without("Replayed"); !w.Equal(b) {
		t.Errorf("%+v Without Replayed is not Equal to %+v", w, b)
	}
	if a.Header.Get("Replayed") != "true" {
		t.Error("Without changed the original's header")
	}
	for _, c := range []Answer{
		{Status: 200, Header: b.Header, Body: "b"},
		{Status: 201, Header: b.Header, Body: "c"},
		{Status: 201, Header: http.Header{"Location": {"/o/1", "/o/2"}}, Body: "b"},
	} {
		if c.Equal(b) {
			t.Errorf("%+v Equal to %+v", c, b)
		}
	}
}

func TestWaiting(t *testing.T) {
	w := NewWaiting(2)
	w.Saw("a")
	w.Saw("a")
	select {
	case <-w.Ready:
		t.Fatal("Ready after one distinct token, want two")
	default:
	}
	w.Saw("b")
	w.Saw("c") // more than n: no second close
	select {
	case <-w.Ready:
	default:
		t.Fatal("not Ready after two distinct tokens")
	}
}
