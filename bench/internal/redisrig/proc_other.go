//go:build !linux

package redisrig

import "syscall"

// sysProcAttr has nothing to add outside Linux: a replica outlives a
// process that dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr { return nil }
