// Package faultnet is an in-process fault proxy for the traffic between
// servers of a test cluster: it can cut any pair of servers apart, make a
// link one-way, or delay it, without root.
//
// Design. Each server i binds 127.0.0.1 and advertises its own loopback
// address 127.0.77.(i+1) (-advertise). Nothing of the server listens there:
// the Network owns, at that address, a TCP listener on the server's RPC
// port (Raft and forwarding), a TCP listener on its serf port (memberlist
// push-pull) and a UDP socket on its serf port (memberlist gossip and
// probes). So every byte one server sends another goes to the receiver's
// advertised address, through the Network, to the receiver's real port on
// 127.0.0.1. Serf is proxied too: it advertises the same IP as the RPC
// port, and a partition that left gossip up would not be one.
//
// The Network decides per source. A UDP packet comes from the sender's
// serf socket, so its source port names the sender, and the Network sends
// it on from the sender's own proxy socket, so the receiver sees it come
// from the sender's advertised address. A TCP connection comes from an
// ephemeral port of 127.0.0.1 (Linux picks 127.0.0.1 as the source of any
// loopback destination); the Network finds which server process owns the
// other end of the connection in /proc (the socket's inode in
// /proc/net/tcp, then the process whose file descriptors hold it), so
// source attribution is Linux-only. A connection no server owns is
// relayed as is and counted (Unattributed).
//
// Faults act on an ordered pair of servers, the link from a sender to a
// receiver. A blocked link drops every byte and packet the sender sends the
// receiver: on TCP the bytes are read and thrown away (a black hole, as
// packets lost in the network: no reset, the sender's calls time out); the
// other direction of the same connection is untouched, so one-way
// partitions are real. Cut blocks both directions and also closes every
// connection open between the two servers, so nothing already in flight
// gets through. A delayed link holds each chunk (or packet) for the delay
// before it sends it, in order.
package faultnet
