// Command udppingpong is the baseline of bench/compare.sh: a ping-pong of
// small UDP datagrams between two processes, with nothing of softroce in
// between, the floor any RoCE latency over UDP on the same machine stands
// on. The server echoes; the client sends n datagrams one at a time and
// prints the half round trip's percentiles in microseconds, in the shape
// of perftest's latency line:
//
//	udppingpong -server 127.0.0.2:18900
//	udppingpong -client 127.0.0.3:0 -peer 127.0.0.2:18900 -n 10000
//	#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
//	2      10000       ...
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"time"
)

func main() {
	server := flag.String("server", "", "echo datagrams on this address")
	client := flag.String("client", "", "send from this address")
	peer := flag.String("peer", "", "the server's address")
	n := flag.Int("n", 10000, "round trips")
	size := flag.Int("s", 2, "datagram size in bytes")
	flag.Parse()
	var err error
	switch {
	case *server != "":
		err = serve(*server)
	case *client != "" && *peer != "":
		err = ping(*client, *peer, *n, *size)
	default:
		err = fmt.Errorf("give -server ADDR, or -client ADDR and -peer ADDR")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "udppingpong:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	a, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	c, err := net.ListenUDP("udp", a)
	if err != nil {
		return err
	}
	buf := make([]byte, 65536)
	for {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if k == 0 {
			return nil // the client's goodbye
		}
		if _, err := c.WriteToUDPAddrPort(buf[:k], from); err != nil {
			return err
		}
	}
}

func ping(local, peer string, n, size int) error {
	la, err := net.ResolveUDPAddr("udp", local)
	if err != nil {
		return err
	}
	ra, err := net.ResolveUDPAddr("udp", peer)
	if err != nil {
		return err
	}
	c, err := net.DialUDP("udp", la, ra)
	if err != nil {
		return err
	}
	defer c.Close()
	msg, buf := make([]byte, max(size, 1)), make([]byte, 65536)
	half := make([]float64, 0, n)
	for range n {
		t := time.Now()
		if _, err := c.Write(msg); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err != nil {
			return fmt.Errorf("round trip %d: %w", len(half), err)
		}
		half = append(half, float64(time.Since(t).Nanoseconds())/2000)
	}
	c.Write(nil)
	slices.Sort(half)
	var sum float64
	for _, h := range half {
		sum += h
	}
	fmt.Println(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]")
	fmt.Printf(" %-6d %-11d %-14.2f %-14.2f %-16.2f %.2f\n", size, n, half[0], half[len(half)-1],
		half[len(half)/2], sum/float64(len(half)))
	return nil
}
