//go:build !linux

package faultnet

import (
	"errors"
	"net"
)

var (
	errNoOwner  = errors.New("finding a socket's process needs Linux's /proc")
	errNoSocket = errors.New("no such socket")
)

func socketOwner(*net.TCPAddr, []int) (int, error) { return 0, errNoOwner }
