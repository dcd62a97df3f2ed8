//go:build !linux

package gctune

// releaseExecutablePages releases nothing outside Linux.
func releaseExecutablePages() (uint64, error) { return 0, nil }
