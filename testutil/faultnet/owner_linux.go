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
		if pid <= 0 {
			continue
		}
		dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // the process exited
		}
		for _, e := range entries {
			if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && link == want {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("%s (inode %s): %w", addr, inode, errNoOwner)
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
