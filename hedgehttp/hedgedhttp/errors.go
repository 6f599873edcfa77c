package hedgedhttp

import (
	"fmt"
	"strings"
)

// MultiError is hedgedhttp v0.9's error of a request whose every attempt
// failed, kept so that programs that name it build. This package never
// returns one: such a request returns its first attempt's error (or
// response), which errors.Is and errors.As see directly.
type MultiError struct {
	Errors        []error
	ErrorFormatFn ErrorFormatFunc
}

// ErrorFormatFunc formats the errors of a [MultiError].
type ErrorFormatFunc func([]error) string

// Error formats the errors with ErrorFormatFn, or as a list:
// "2 errors occurred:\n\t* first\n\t* second\n\n".
func (e *MultiError) Error() string {
	if e.ErrorFormatFn != nil {
		return e.ErrorFormatFn(e.Errors)
	}
	var b strings.Builder
	if len(e.Errors) == 1 {
		b.WriteString("1 error occurred:")
	} else {
		fmt.Fprintf(&b, "%d errors occurred:", len(e.Errors))
	}
	for _, err := range e.Errors {
		fmt.Fprintf(&b, "\n\t* %s", err)
	}
	b.WriteString("\n\n")
	return b.String()
}

// String returns the errors in Go syntax.
func (e *MultiError) String() string { return fmt.Sprintf("*%#v", e.Errors) }

// ErrorOrNil returns e, or nil when e holds no error.
func (e *MultiError) ErrorOrNil() error {
	if e == nil || len(e.Errors) == 0 {
		return nil
	}
	return e
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (e *MultiError) Unwrap() []error { return e.Errors }
