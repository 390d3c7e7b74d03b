package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"time"
)

// group connects the ranks in a star through rank 0 at MASTER_ADDR:MASTER_PORT. allReduce sums a vector
// over all ranks: every rank sends its vector to rank 0, which adds them in rank order (so every run
// gives the same result) and sends the sum back.
type group struct {
	rank, world int
	peers       []*peer // rank 0: one per other rank, index rank-1
	master      *peer   // other ranks: the connection to rank 0
}

type peer struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func newPeer(c net.Conn) *peer { return &peer{conn: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)} }

// rendezvous forms the group: rank 0 listens on listenAddr and waits for world-1 ranks; the others dial
// masterAddr until it answers or timeout passes.
func rendezvous(rank, world int, listenAddr, masterAddr string, timeout time.Duration) (*group, error) {
	g := &group{rank: rank, world: world}
	if world == 1 {
		return g, nil
	}
	if rank == 0 {
		return g, g.accept(listenAddr, timeout)
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", masterAddr, 2*time.Second)
		if err == nil {
			g.master = newPeer(c)
			return g, g.master.send([]float64{float64(rank)})
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("rank %d: rank 0 at %s did not answer within %s: %w", rank, masterAddr, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (g *group) accept(addr string, timeout time.Duration) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rank 0: listening on %s: %w", addr, err)
	}
	defer l.Close()
	g.peers = make([]*peer, g.world-1)
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(timeout))
	for joined := 0; joined < g.world-1; joined++ {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("rank 0: waiting for %d more ranks: %w", g.world-1-joined, err)
		}
		p := newPeer(c)
		hello, err := p.recv(1)
		if err != nil {
			return fmt.Errorf("rank 0: handshake: %w", err)
		}
		r := int(hello[0])
		if r < 1 || r >= g.world || g.peers[r-1] != nil {
			return fmt.Errorf("rank 0: unexpected rank %d joined", r)
		}
		g.peers[r-1] = p
	}
	return nil
}

// allReduce replaces v by the sum of every rank's v.
func (g *group) allReduce(v []float64) error {
	if g.world == 1 {
		return nil
	}
	if g.rank != 0 {
		if err := g.master.send(v); err != nil {
			return fmt.Errorf("rank %d: sending to rank 0: %w", g.rank, err)
		}
		sum, err := g.master.recv(len(v))
		if err != nil {
			return fmt.Errorf("rank %d: lost rank 0: %w", g.rank, err)
		}
		copy(v, sum)
		return nil
	}
	for i, p := range g.peers {
		part, err := p.recv(len(v))
		if err != nil {
			return fmt.Errorf("rank 0: lost rank %d: %w", i+1, err)
		}
		for j := range v {
			v[j] += part[j]
		}
	}
	for i, p := range g.peers {
		if err := p.send(v); err != nil {
			return fmt.Errorf("rank 0: sending to rank %d: %w", i+1, err)
		}
	}
	return nil
}

// broadcast replaces v on every rank by rank 0's v.
func (g *group) broadcast(v []float64) error {
	if g.rank != 0 {
		for i := range v {
			v[i] = 0
		}
	}
	return g.allReduce(v)
}

func (g *group) close() {
	for _, p := range append(g.peers, g.master) {
		if p != nil {
			p.conn.Close()
		}
	}
}

// send writes a length-prefixed vector of float64.
func (p *peer) send(v []float64) error {
	buf := make([]byte, 4+8*len(v))
	binary.LittleEndian.PutUint32(buf, uint32(len(v)))
	for i, f := range v {
		binary.LittleEndian.PutUint64(buf[4+8*i:], math.Float64bits(f))
	}
	if _, err := p.w.Write(buf); err != nil {
		return err
	}
	return p.w.Flush()
}

// recv reads a vector of n float64 written by send.
func (p *peer) recv(n int) ([]float64, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(p.r, hdr[:]); err != nil {
		return nil, err
	}
	if got := int(binary.LittleEndian.Uint32(hdr[:])); got != n {
		return nil, fmt.Errorf("expected %d values, got %d", n, got)
	}
	buf := make([]byte, 8*n)
	if _, err := io.ReadFull(p.r, buf); err != nil {
		return nil, err
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:]))
	}
	return v, nil
}
