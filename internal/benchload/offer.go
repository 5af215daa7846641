package benchload

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// OfferBody sends one request (header: the request line and headers, ending with the blank line)
// on a new connection, writing body in 16 KiB pieces until the answer arrives, as a client that
// reads while it writes (an attacker offering a large body stops when refused). It returns the
// answer's status code, or "dial error" or "no answer". Nothing waits on the connection for more
// than 30 s.
func OfferBody(addr string, header, body []byte) string {
	conn, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return "dial error"
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- "no answer"
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		answered <- strconv.Itoa(resp.StatusCode)
	}()
	if _, err := conn.Write(header); err != nil {
		_ = conn.Close()
		return <-answered
	}
	for rest := body; len(rest) > 0; {
		select {
		case answer := <-answered:
			return answer
		default:
		}
		n := min(len(rest), 16<<10)
		if _, err := conn.Write(rest[:n]); err != nil {
			break
		}
		rest = rest[n:]
	}
	return <-answered
}
