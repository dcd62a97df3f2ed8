package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// errPlainHTTP ends the TLS handshake of a connection that sent plain
// HTTP: it was answered with a 400 and closed.
var errPlainHTTP = errors.New("client sent an HTTP request to an HTTPS server: answered 400")

// Bounds of the answer to a plain-HTTP request on the TLS port.
const (
	// maxPlainHead bounds the request head read to name the https URL;
	// a longer one is answered without it.
	maxPlainHead = 8 << 10
	// plainDrainLimit and plainDrainTime bound what is read of the
	// request after the answer, so that the close does not reset the
	// connection before the client read the answer.
	plainDrainLimit = 256 << 10
	plainDrainTime  = time.Second
)

// plainHTTPListener sits under the TLS listener of the HTTP API and answers
// a client that speaks plain HTTP to it with a 400 that names the https://
// address, whatever the method (net/http answers only GET, HEAD, POST, PUT
// and OPTIONS, and without the address). A TLS record never starts with an
// upper-case letter, an HTTP request always does, so the first byte tells
// them apart. The connection is read in the TLS handshake, under the
// handshake deadline the HTTP server sets: a client that sends nothing, or
// half a request, holds it no longer than any other handshake.
type plainHTTPListener struct{ net.Listener }

func (l plainHTTPListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &plainHTTPConn{Conn: c}, nil
}

// plainHTTPConn checks the first bytes a client sends. Its reads are the
// TLS connection's, which one goroutine at a time makes.
type plainHTTPConn struct {
	net.Conn
	checked bool
}

func (c *plainHTTPConn) Read(p []byte) (int, error) {
	if c.checked {
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.checked = true
	if p[0] < 'A' || p[0] > 'Z' {
		return n, err
	}
	c.answerPlainHTTP(p[:n])
	return 0, errPlainHTTP
}

// answerPlainHTTP answers the plain-HTTP request that starts with head,
// then closes the connection.
func (c *plainHTTPConn) answerPlainHTTP(head []byte) {
	defer c.Conn.Close()
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(head), io.LimitReader(c.Conn, maxPlainHead)))
	msg := "Client sent an HTTP request to an HTTPS server: this Nops API is served over TLS only; use an https:// address"
	if req, err := http.ReadRequest(br); err == nil {
		host := req.Host
		if !plainHostOK(host) {
			host = c.LocalAddr().String()
		}
		msg = fmt.Sprintf("Client sent an HTTP request to an HTTPS server: this Nops API is served over TLS only; use https://%s%s (for the CLI: NOPS_ADDR=https://%s)",
			host, req.URL.RequestURI(), host)
	}
	body, _ := json.Marshal(map[string]string{"error": msg})
	body = append(body, '\n')
	_, _ = fmt.Fprintf(c.Conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Read what is left of the request (a body), so that closing with
	// unread data does not reset the connection under the answer.
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(plainDrainTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, plainDrainLimit))
}

// plainHostOK reports whether host, from a request's Host header, is a
// host[:port] fit to repeat in the answer.
func plainHostOK(host string) bool {
	if host == "" || len(host) > 255 {
		return false
	}
	return strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == "" &&
		!strings.ContainsAny(host[:1], ".-:")
}
