package hedgehttp

import (
	"strings"
	"testing"
)

func TestWithObserverNil(t *testing.T) {
	if err := NewTransport(nil, nil, WithObserver(nil)).Err(); err == nil || !strings.Contains(err.Error(), "WithObserver") {
		t.Errorf("Err() = %v, want one naming WithObserver", err)
	}
}
