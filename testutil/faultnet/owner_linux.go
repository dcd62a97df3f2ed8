//go:build linux

package faultnet

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

var (
	// errNoOwner is returned when no given process owns a connection's
	// end.
	errNoOwner = errors.New("no known process owns the socket")
	// errNoSocket is returned when a connection's end is gone: its
	// process closed it.
	errNoSocket = errors.New("no such socket")
)

// socketOwner returns which of pids owns the TCP socket whose local
// address is addr (the remote end of a connection the Network accepted).
func socketOwner(addr *net.TCPAddr, pids []int) (int, error) {
	inode, err := socketInode(addr)
	if err != nil {
		return 0, err
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		if pid > 0 && ownsSocket(pid, want) {
			return pid, nil
		}
	}
	// No server owns it. If no process at all does, its owner closed it
	// while the kernel still listed it: it carries nothing more.
	if procs, err := os.ReadDir("/proc"); err == nil {
		for _, e := range procs {
			if pid, err := strconv.Atoi(e.Name()); err == nil && ownsSocket(pid, want) {
				return 0, fmt.Errorf("%s (inode %s, process %d): %w", addr, inode, pid, errNoOwner)
			}
		}
		return 0, fmt.Errorf("%s (inode %s) is owned by no process: %w", addr, inode, errNoSocket)
	}
	return 0, fmt.Errorf("%s (inode %s): %w", addr, inode, errNoOwner)
}

// ownsSocket reports whether process pid has the socket want open.
func ownsSocket(pid int, want string) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false // the process exited, or is not ours to read
	}
	for _, e := range entries {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && link == want {
			return true
		}
	}
	return false
}

// socketInode finds the inode of the IPv4 TCP socket bound to addr in
// /proc/net/tcp, whose addresses are the hex of the IP in host byte order
// (little-endian on the machines this runs on) and of the port.
func socketInode(addr *net.TCPAddr) (string, error) {
	ip := addr.IP.To4()
	if ip == nil {
		return "", fmt.Errorf("%s is not an IPv4 address", addr)
	}
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], addr.Port)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", fmt.Errorf("reading the TCP sockets: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
		// A socket that is closing has inode 0: its process let it go.
		if len(fields) >= 10 && fields[1] == local && fields[9] != "0" {
			return fields[9], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading the TCP sockets: %w", err)
	}
	return "", fmt.Errorf("no TCP socket bound to %s: %w", addr, errNoSocket)
}
