package exec

import (
	"context"
	"errors"
	"io"
	"net"
)

// marked is an error marked by tailcut.Final or tailcut.Transient.
type marked struct {
	err   error
	class Class
}

func (m *marked) Error() string { return m.err.Error() }
func (m *marked) Unwrap() error { return m.err }

// Mark returns err marked with class c (nil for a nil err): ErrorClass
// returns c for it, and Unmark returns err.
func Mark(err error, c Class) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, class: c}
}

// Unmark returns err without the mark Mark put on it (only a mark at the
// top: one wrapped further stays as the caller wrapped it).
func Unmark(err error) error {
	if m, ok := err.(*marked); ok { //nolint:errorlint // only a mark at the top counts
		return m.err
	}
	return err
}

// ErrorClass is tailcut.ErrorClass, whose doc says the rules: a mark's
// class, Retryable for a failure to reach a healthy downstream, else
// Fatal.
func ErrorClass(err error) Class {
	if err == nil {
		return Success
	}
	if m, ok := err.(*marked); ok { //nolint:errorlint // only a mark at the top counts
		return m.class
	}
	var m *marked
	if errors.As(err, &m) {
		return m.class
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		return Retryable
	}
	return Fatal
}
