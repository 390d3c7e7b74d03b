package main

import (
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// port returns a free loopback port.
func port() int {
	_, p, _ := net.SplitHostPort(benchkit.FreeAddr())
	n, _ := strconv.Atoi(p)
	return n
}

func resourceQty(s string) resource.Quantity { return resource.MustParse(s) }
