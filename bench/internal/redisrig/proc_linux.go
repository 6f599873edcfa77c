package redisrig

import "syscall"

// sysProcAttr makes the kernel kill a replica if the process that started
// it dies without stopping it (SIGKILL, a crash).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
