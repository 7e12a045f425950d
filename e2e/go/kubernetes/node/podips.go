package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// podIPs hands out <prefix>.1 to <prefix>.254, one per live sandbox. Only
// loopback addresses, because nothing on these machines may ever dial an
// address outside 127.0.0.0/8 (a probe, a Service endpoint).
type podIPs struct {
	prefix string

	mu        sync.Mutex
	used      [255]bool      // used[n]: <prefix>.n belongs to a sandbox
	bySandbox map[string]int // sandbox ID -> n
}

func newPodIPs(prefix string) (*podIPs, error) {
	octets := strings.Split(prefix, ".")
	if len(octets) != 3 {
		return nil, fmt.Errorf("%q is not three octets (like 127.0.3)", prefix)
	}
	for i, o := range octets {
		n, err := strconv.Atoi(o)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != o {
			return nil, fmt.Errorf("%q: octet %q is not a number from 0 to 255", prefix, o)
		}
		if i == 0 && n != 127 {
			return nil, fmt.Errorf("%q is not inside 127.0.0.0/8: pod IPs must be loopback addresses", prefix)
		}
	}
	return &podIPs{prefix: prefix, bySandbox: map[string]int{}}, nil
}

// reserve takes the lowest free address. The caller binds it to a sandbox ID
// with bind once the runtime has made one, or gives it back with release.
func (p *podIPs) reserve() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := 1; n <= 254; n++ {
		if !p.used[n] {
			p.used[n] = true
			return n, nil
		}
	}
	return 0, fmt.Errorf("all 254 pod IPs in %s.0/24 are taken", p.prefix)
}

func (p *podIPs) release(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used[n] = false
}

// bind records n as the sandbox's address; a sandbox ID made again (the fake
// derives IDs from pod metadata) gives its previous address back.
func (p *podIPs) bind(sandboxID string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.bySandbox[sandboxID]; ok && old != n {
		p.used[old] = false
	}
	p.bySandbox[sandboxID] = n
}

// free gives back the sandbox's address, if it has one.
func (p *podIPs) free(sandboxID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.bySandbox[sandboxID]
	if !ok {
		return "", false
	}
	delete(p.bySandbox, sandboxID)
	p.used[n] = false
	return p.addr(n), true
}

// lookup returns the sandbox's address.
func (p *podIPs) lookup(sandboxID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.bySandbox[sandboxID]
	if !ok {
		return "", false
	}
	return p.addr(n), true
}

func (p *podIPs) addr(n int) string { return p.prefix + "." + strconv.Itoa(n) }
