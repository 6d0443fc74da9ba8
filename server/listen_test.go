package server

import (
	"net"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:0": true, "[::1]:0": true, "0.0.0.0:0": false, "[::]:0": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopback(a); got != want {
			t.Errorf("%s: loopback %v, want %v", addr, got, want)
		}
	}
}
