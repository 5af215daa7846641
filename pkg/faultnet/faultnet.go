// Package faultnet is a TCP proxy that injects network faults between two processes of a test on
// loopback, where iptables and network namespaces are not at hand (no root, one process for
// several servers): Freeze stops every byte in both directions while keeping the connections open,
// as a SIGSTOPped peer or a black-holed route does; Cut closes the connections and refuses new ones,
// as a partition that resets does. A cut can be limited to the connections of one sender, told apart
// by a tag read from the start of each connection (TagEtcdPeer tags an etcd member's peer traffic by
// its X-Server-From header), so one member of a cluster can be cut off from its peers while the
// others keep talking.
//
// It is for tests: it trusts its callers and listens on loopback only.
package faultnet

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Tagger names the sender of a connection from the bytes it sent first (peeked, never consumed):
// "" when it cannot tell. It may read up to the first request's headers.
type Tagger func(r *bufio.Reader) string

// TagEtcdPeer tags a connection to an etcd member's peer listener with the member ID of its sender:
// raft's streams, pipelines and snapshots send X-Server-From on every request. Other peer requests
// (lease forwarding, /version) carry no such header and are tagged "".
func TagEtcdPeer(r *bufio.Reader) string {
	// The headers of a raft request fit in the first kilobytes. Each Peek asks for one byte more
	// than is buffered, which reads what the sender has sent so far (never more than it sent).
	for n := 1; n <= 16<<10; n = r.Buffered() + 1 {
		_, err := r.Peek(n)
		head, _ := r.Peek(r.Buffered())
		if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head[:i+4])))
			if err != nil {
				return ""
			}
			return req.Header.Get("X-Server-From")
		}
		if err != nil {
			return ""
		}
	}
	return ""
}

// Proxy forwards the connections it accepts to one target address.
type Proxy struct {
	ln     net.Listener
	target string
	tagger Tagger

	mu sync.Mutex
	// frozen holds every copy in both directions until Thaw; thawed is closed by Thaw.
	frozen bool
	thawed chan struct{}
	// cut are the tags whose connections are refused; cutAll refuses every connection.
	cut    map[string]bool
	cutAll bool
	conns  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup
}

// pair is one proxied connection: the client's and the one to the target.
type pair struct {
	client, upstream net.Conn
	tag              string
}

func (p *pair) close() {
	_ = p.client.Close()
	if p.upstream != nil {
		_ = p.upstream.Close()
	}
}

// Option configures a Proxy.
type Option func(*Proxy)

// WithTagger tags each connection with tagger, for Cut and Heal of one sender.
func WithTagger(tagger Tagger) Option { return func(p *Proxy) { p.tagger = tagger } }

// Listen starts a proxy on a free loopback port (listen "127.0.0.1:0") or on listen, forwarding to
// target. Close stops it.
func Listen(listen, target string, opts ...Option) (*Proxy, error) {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, thawed: make(chan struct{}), cut: map[string]bool{}, conns: map[*pair]struct{}{}}
	close(p.thawed)
	for _, opt := range opts {
		opt(p)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops every byte in both directions, on the connections open now and on those accepted
// until Thaw, without closing any: the peer sees a process that stopped answering.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thawed = true, make(chan struct{})
	}
}

// Thaw lets the bytes held by Freeze go on.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

// Cut closes the connections tagged tag and refuses new ones (each is closed once its tag is
// read) until Heal(tag). Cut("") with no Tagger, or CutAll, cuts every connection.
func (p *Proxy) Cut(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[tag] = true
	for c := range p.conns {
		if c.tag == tag {
			c.close()
		}
	}
}

// CutAll closes every connection and refuses new ones until HealAll.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAll = true
	for c := range p.conns {
		c.close()
	}
}

// Heal ends Cut(tag).
func (p *Proxy) Heal(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.cut, tag)
}

// HealAll ends CutAll.
func (p *Proxy) HealAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAll = false
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// dialTimeout bounds connecting to the target.
const dialTimeout = 5 * time.Second

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	in := bufio.NewReaderSize(client, 16<<10)
	pr := &pair{client: client}
	if p.tagger != nil {
		pr.tag = p.tagger(in)
	}
	if !p.track(pr) {
		pr.close()
		return
	}
	defer p.untrack(pr)
	up, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		pr.close()
		return
	}
	p.mu.Lock()
	pr.upstream = up
	refused := p.closed || p.cutAll || p.cut[pr.tag]
	p.mu.Unlock()
	if refused {
		pr.close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(up, in); done <- struct{}{} }()
	go func() { p.copy(client, up); done <- struct{}{} }()
	<-done
	pr.close()
	<-done
}

// track registers a connection unless it is refused.
func (p *Proxy) track(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cutAll || p.cut[pr.tag] {
		return false
	}
	p.conns[pr] = struct{}{}
	return true
}

func (p *Proxy) untrack(pr *pair) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, pr)
}

// copy moves bytes from src to dst, each chunk only while the proxy is not frozen.
func (p *Proxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitThawed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitThawed blocks while the proxy is frozen.
func (p *Proxy) waitThawed() {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	<-thawed
}
